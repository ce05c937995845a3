"""The engine: the model's own machinery, on the common floor (``core.common``) and below everything
else. Model types and facts, tokens and the one label rule, the Trace record, the one role map of a
model's parts, the one scoped-hook helper, config reading, Hugging Face loading and the xray attention.
Nothing here imports anything above it.
"""

import os

# No network at run time: never let transformers or huggingface_hub try the hub. Set before any
# engine module imports them (they read these variables at import time).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
