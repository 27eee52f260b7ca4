"""`python -m vtrain.cli ARGS` = `vtrain ARGS`."""
from vtrain.cli.app import main

main()
