"""One module per kind of study, each registering its `StudyKind` when imported; `noiseaware.studies` imports
every module here, so a new kind is its module (and its test) alone."""
