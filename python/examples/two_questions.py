# Two questions about one document, the document's KV cache compressed once by K-VEC (docs/python.md).
import kvec, time
m = kvec.Model("models/SmolLM2-135M-Instruct.Q4_1.gguf", threads=2)
doc = open("data/text/sotu/2009_barack_obama_d.txt").read()[:6000]
t = time.perf_counter(); a = m.answer(doc, ["\n\nWhich crisis does the speaker describe?", "\n\nWho is the speaker addressing?"], policy="kvec", compression_ratio=0.5)
print(a.answers, f"{time.perf_counter() - t:.2f} s, {a.kv_entries} KV entries kept, {a.stats['prefills']} prefill")
