"""The operator's tool for Vertex AI: ``python -m gcp`` uploads, deploys, checks, predicts and rolls back.

It runs on the operator's machine with the ``deploy`` extra (google-cloud-aiplatform, google-cloud-logging)
and is never imported by the container, whose own Vertex AI side is ``app/vertex/`` (checked by
``tests/unit/test_structure.py``). It may use the container's modules that it shares a fact with: the
Cloud Storage model layout (``app/model_sources/gcs.py``) and the predict request's limits
(``app/vertex/predict.py``).
"""
