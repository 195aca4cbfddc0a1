from llmco2.cli import entrypoint

entrypoint()
