"""Model families, each written once in TT-NN on the blocks of :mod:`tt_models.tt`."""
