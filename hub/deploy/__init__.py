"""What takes a trained model out of the hub: predictions as CSV rows (:mod:`hub.deploy.predict`), an HTTP server
(:mod:`hub.deploy.serve`), ONNX and ``torch.export`` files (:mod:`hub.deploy.exporter`), the Hugging Face Hub
(:mod:`hub.deploy.hf`) and publishing a run as a tag (:mod:`hub.deploy.publish`)."""
