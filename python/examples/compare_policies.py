"""A researcher's comparison (docs/python.md): three eviction policies at three KV budgets on the
synthetic long-context suite, both protocols, one plot.

    PYTHONPATH=build/release/python /usr/bin/python3 python/examples/compare_policies.py [MODEL] [OUT.png]
"""
import sys
import time

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import kvec  # noqa: E402

model = kvec.Model(sys.argv[1] if len(sys.argv) > 1 else "models/SmolLM2-135M-Instruct.Q4_1.gguf", threads=2)
out = sys.argv[2] if len(sys.argv) > 2 else "compare_policies.png"
fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
for ax, protocol in zip(axes, ["query-aware", "query-agnostic"]):
    t = time.perf_counter()
    r = kvec.eval(model, suite="synthetic-1k", policies=["full", "snapkv", "streaming", "kvec"],
                  budgets=[64, 128, 256], protocol=protocol, samples=2)
    print(f"{protocol}: {len(r.records)} answers in {time.perf_counter() - t:.1f} s")
    rows = r.rows()
    for policy in ["snapkv", "streaming", "kvec"]:
        mine = [x for x in rows if x["policy"] == policy]
        budgets = [x["budget"] for x in mine]
        ax.plot(budgets, [x["average"] for x in mine], marker="o", label=policy)
        ax.fill_between(budgets, [x["average_lo"] for x in mine], [x["average_hi"] for x in mine], alpha=0.15)
        print("  " + "  ".join(f"{policy} B={x['budget']}: {x['average']:.1f} [{x['average_lo']:.1f}, "
                               f"{x['average_hi']:.1f}]" for x in mine))
    full = next(x for x in rows if x["policy"] == "full")
    print(f"  full: {full['average']:.1f} [{full['average_lo']:.1f}, {full['average_hi']:.1f}]")
    ax.axhline(full["average"], color="grey", linestyle="--", label="full cache")
    ax.set(title=protocol, xlabel="KV budget B (entries per KV head and layer)", xticks=[64, 128, 256])
axes[0].set_ylabel("synthetic-1k average score")
axes[0].legend()
fig.tight_layout()
fig.savefig(out, dpi=100)
print(f"wrote {out}")
