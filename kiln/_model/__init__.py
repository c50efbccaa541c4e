"""The job model: the values every layer shares. The leaf of kiln's layers: it
imports nothing of kiln but ``kiln._errors``."""
