"""Data: raw formats, tokenization units, splitting, preparation."""
