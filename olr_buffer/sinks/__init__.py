"""The changefeed's outputs, one package per format."""
