"""What tests and benches share, shipped with the package as transformers ships testing_utils: benches run from a
wheel install."""
