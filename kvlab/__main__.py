from kvlab.cli import run

run()
