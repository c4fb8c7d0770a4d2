"""Compressors, error feedback and wire packing (numpy only; servers and clients share them)."""
