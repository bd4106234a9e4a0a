"""Click commands: a thin layer over the operations modules, one module per verb family."""
