"""`hfzoo serve`: a base model and its adapters behind one HTTP endpoint, requests for any adapter batched together.

`scheduler.py` holds the batching engine (no HTTP), `app.py` the FastAPI app over it; both need the `serve` extra
(`pip install 'hfzoo[serve]'`), which is why `hfzoo serve` imports this package only when it runs.
"""
