"""Run inside one environment: median wall time of `from_pretrained(ckpt, device_map="auto")` (no trigger set).

python bench/load_time.py CKPT REPEAT    -> prints one float (seconds)
"""

import os
import statistics
import sys
import time

os.environ.pop("ACCELERATE_INIT_INCLUDE_BUFFERS", None)
from transformers import AutoModelForCausalLM  # noqa: E402

ckpt, repeat = sys.argv[1], int(sys.argv[2])
AutoModelForCausalLM.from_pretrained(ckpt, device_map="auto")  # warm imports and the page cache
times = []
for _ in range(repeat):
    t = time.perf_counter()
    AutoModelForCausalLM.from_pretrained(ckpt, device_map="auto")
    times.append(time.perf_counter() - t)
print(statistics.median(times))
