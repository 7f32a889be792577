"""BART and MBart (HF ``BartForConditionalGeneration``, ``MBartForConditionalGeneration``)."""
