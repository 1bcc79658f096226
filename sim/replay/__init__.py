"""Replays: the file format and the recorder that writes it."""
