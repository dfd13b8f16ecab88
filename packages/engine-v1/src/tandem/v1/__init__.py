"""Tandem engine v1: engine core and detokenizer in their own processes."""
