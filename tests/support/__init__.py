"""The tests' one support library: configs, waits, database fixtures, builders."""
