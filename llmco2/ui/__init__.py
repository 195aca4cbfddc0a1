"""The calculator page (``llmco2 ui``, the ``ui`` extra): a local web page where a user picks a
model (or uploads a config.json), GPUs, a load, a region and latency targets, and sees the
configurations ranked by :func:`llmco2.compare` with their intervals, a chart and the notes.

- :mod:`llmco2.ui.form`: the form's text read into ``compare``'s arguments (no web framework);
- :mod:`llmco2.ui.catalog`: the pickers' choices;
- :mod:`llmco2.ui.app`: the FastAPI app (``create_app``) serving ``static/`` and the JSON endpoints.

The stage comes after ``api`` and before ``cli``: it uses the use cases, and the command line
starts it (``llmco2 ui``) and gives it the command line's wording for errors.
"""
