"""Reporters: each turns a finished :class:`~gradcheck.results.RunReport` into one format.

A reporter computes nothing: every number it shows is in the result records.
"""

from __future__ import annotations

FORMATS = ("text", "json")
