"""Small shared helpers: keys, atomic files, progress bars, text tables, validators and numerics."""
