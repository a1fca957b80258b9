"""engine_then_now's "now" arm with one change undone: the update runs every row whole (no shared start),
against the same "then" runs (runs/engine_then_now/, reused when finished). Separates the two changes of the
"now" arm, the bf16 sampler and the update's shared start, when "now" loses held-out success.

    python benchmarks/engine_now_whole.py --seeds 0           # one seed, on 2 idle cores: about 13 min
    python benchmarks/engine_now_whole.py --report
"""

from __future__ import annotations

from engine_then_now import ARMS
from lora_vs_full import main

ARMS_WHOLE = {"then": ARMS["then"],
              "now_whole": {**ARMS["now"], "engine": dict(share_prefix=False)}}

if __name__ == "__main__":
    main(arms=ARMS_WHOLE, name="engine_then_now", doc=__doc__)
