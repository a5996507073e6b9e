"""Data files of the papers' published numbers (YAML/CSV), read through importlib.resources."""
