"""The catalogue: the GPUs the data folders name, the shape lists the tables and plots use, and
every number the blog posts published (not measured here). plots/tables.py,
plots/make_tables_md.py and the plot scripts read it; nothing else holds these numbers.

Each post is named by its title and GPU, as the top README's "The posts" section lists them.
Times are given in the unit the post printed, unless the name says otherwise.
Python 3 standard library only.
"""

# ---------------------------------------------------------------------------------------
# GPUs: the folders under plots/data/, in the order tables list them (others follow, sorted)

GPU_ORDER = ("h200", "h100")
# As the tables name a GPU: the device name with its SM count and L2 size.
GPU_NAMES = {"h200": "NVIDIA H200 (132 SMs, 60 MiB L2)", "h100": "NVIDIA H100 80GB HBM3 (132 SMs, 50 MiB L2)"}
GPU_SHORT = {"h200": "H200", "h100": "H100"}
# As the plots' titles name a GPU: the device name only (any folder the plots may be given).
GPU_DEVICE_NAMES = {"h200": "NVIDIA H200", "h100": "NVIDIA H100 80GB HBM3", "a100": "NVIDIA A100",
                    "l40s": "NVIDIA L40S", "l4": "NVIDIA L4", "rtx-4090": "NVIDIA GeForce RTX 4090",
                    "rtx-3090": "NVIDIA GeForce RTX 3090"}

# ---------------------------------------------------------------------------------------
# Shapes (common/shapes.cpp names them; GLOSSARY.md#tables describes them)

# Table A: fp16, D 128, block 16.
TABLE_A = ["llama7b-B1-ctx1k", "llama7b-B1-ctx4k", "llama7b-B8-ctx2k", "llama7b-B32-ctx1k",
           "llama70b-B1-ctx4k", "llama70b-B4-ctx2k", "llama70b-B16-ctx8k",
           "mqa-B1-ctx4k", "mqa-B16-ctx4k", "mqa-B64-ctx2k"]
# Table B: fp16, B 1, the RTX 4090 post's models over the context length.
TABLE_B = ["qwen1.5b-B1-ctx128", "qwen1.5b-B1-ctx512", "qwen1.5b-B1-ctx1k", "qwen1.5b-B1-ctx2k",
           "qwen1.5b-B1-ctx4k", "qwen7b-B1-ctx1k", "qwen7b-B1-ctx2k", "qwen7b-B1-ctx4k"]
# Lesson 03's long contexts: a batch of mixed lengths and two 128k-token contexts.
LONG_SHAPES = ["llama70b-B16-mixed", "llama70b-B1-ctx128k", "mqa-B1-ctx128k"]
# Table C (bf16, H8/Hkv4), in (B, ctx) order, and the part of it the TGS sweep uses.
TABLE_C = ["h8kv4-B1-ctx256", "h8kv4-B32-ctx128", "h8kv4-B32-ctx256", "h8kv4-B32-ctx512",
           "h8kv4-B32-ctx1k", "h8kv4-B64-ctx128", "h8kv4-B64-ctx256", "h8kv4-B64-ctx1k",
           "h8kv4-B128-ctx256", "h8kv4-B128-ctx512"]
TABLE_C_TGS_SWEEP = ["h8kv4-B1-ctx256", "h8kv4-B32-ctx256", "h8kv4-B32-ctx512", "h8kv4-B64-ctx128",
                     "h8kv4-B64-ctx1k", "h8kv4-B128-ctx256", "h8kv4-B128-ctx512"]
# Lesson 01: Table A and two Table C shapes.
LESSON01_SHAPES = TABLE_A + ["h8kv4-B32-ctx256", "h8kv4-B128-ctx512"]
# Lesson 05's grid (bf16, H8/Hkv4): B 1/32/64/128 x ctx 256..2k, each at the gate's sigmas.
LESSON05_GRID = [f"h8kv4-B{b}-ctx{t}" for b in (1, 32, 64, 128) for t in ("256", "512", "1k", "2k")]
LESSON05_SIGMAS = ("0", "1.5", "2.9")
# Lesson 06's prefill shapes, (shape, cached prefix); the prompt shapes are those of prefix 0.
LESSON06_SHAPES = (("B32-T256-H8-Hkv4", "0"), ("B16-T1024-H8-Hkv4", "0"), ("B16-T1024-H8-Hkv4", "1024"),
                   ("B4-T4096-H32-Hkv8", "0"), ("B4-T4096-H32-Hkv8", "1024"), ("B1-T8192-H32-Hkv8", "0"))
PREFILL_SHAPES = [s for s, prefix in LESSON06_SHAPES if prefix == "0"]
# Lesson 07's hand-offs: T<tokens>-L<layers>-<pair>; (pair, what it is), 8 KV heads unless -kv<heads>.
LESSON07_TOKENS = (256, 4096, 32768)
LESSON07_LAYERS = 32
LESSON07_PAIRS = (("tp4to2", "TP 4 -> 2, 8 KV heads"), ("tp2to4", "TP 2 -> 4, 8 KV heads"),
                  ("tp1to4-kv2", "TP 1 -> 4, 2 KV heads"))
# Thread-group sizes of lesson 02's steps with a TGS (and of the H200 post's sweep).
TGS = (4, 8, 16)

# ---------------------------------------------------------------------------------------
# "vLLM 의 Paged Attention V2 를 Triton 으로 — MQA 의 SM 점유율 구멍을 split-k 로 닫기"
# (an NVIDIA L4; fp16, its Triton kernels)

# Section 6 ("the first heuristic was wrong"), its table with split-k forced, ms: single pass,
# split-k. The single-pass column is also its single-pass kernel's time beside lesson 01.
POST_L4_MS = {"llama70b-B4-ctx2k": (0.165, 0.196), "llama7b-B1-ctx1k": (0.142, 0.196),
              "mqa-B16-ctx4k": (0.331, 0.196)}
# Section 7 ("final numbers"), mqa-B16-ctx4k, ms: paged single pass before, paged split-k after
# (0.197 there, where section 6's table printed 0.196 for the same shape), SDPA; the gap to SDPA
# it printed before and after, in %.
POST_L4_MQA = {"shape": "mqa-B16-ctx4k", "before": 0.331, "after": 0.197, "sdpa": 0.044,
               "gap_before": 645, "gap_after": 344}
# Section 6: its second rule picked the faster kernel on 9 of the 10 Table A shapes.
POST_L4_AUTO_RIGHT = (9, 10)

# ---------------------------------------------------------------------------------------
# "mini-infer系统实战-15-Flash Decoding:Split-K Attention 为什么能把 SM 利用率拉起来"
# (an NVIDIA RTX 4090; fp16, B 1, its Triton kernels)

# Its seq_len sweep, ms: base (single pass), split-k, and the split count it used.
POST_4090_MS = {"qwen1.5b-B1-ctx128": (0.021, 0.064, 2), "qwen1.5b-B1-ctx512": (0.033, 0.064, 8),
                "qwen1.5b-B1-ctx1k": (0.058, 0.064, 11), "qwen1.5b-B1-ctx2k": (0.112, 0.070, 11),
                "qwen1.5b-B1-ctx4k": (0.224, 0.068, 11), "qwen7b-B1-ctx1k": (0.074, 0.063, 5),
                "qwen7b-B1-ctx2k": (0.129, 0.068, 5), "qwen7b-B1-ctx4k": (0.256, 0.100, 5)}

# ---------------------------------------------------------------------------------------
# The untitled post on a gated ("FIR gate", no softmax) attention (an NVIDIA H200; bf16,
# H8/Hkv4; its shapes BxTy are our h8kv4-Bx-ctxy)

# Its TGS sweep, us, at TGS 4 / 8 / 16.
POST_H200_TGS_SWEEP_US = {
    "h8kv4-B1-ctx256": (30.28, 27.32, 31.98), "h8kv4-B32-ctx256": (41.64, 33.07, 33.82),
    "h8kv4-B32-ctx512": (79.67, 62.30, 64.60), "h8kv4-B64-ctx128": (34.05, 25.68, 21.48),
    "h8kv4-B64-ctx1k": (297.92, 225.29, 210.27), "h8kv4-B128-ctx256": (91.14, 71.29, 71.29),
    "h8kv4-B128-ctx512": (176.84, 137.00, 137.00),
}
# Its ablation at TGS 8, us: baseline / + paired K loads / + q in registers.
POST_H200_ABLATION_US = {
    "h8kv4-B1-ctx256": (27.32, 25.37, 24.55), "h8kv4-B32-ctx128": (18.32, 15.96, 15.18),
    "h8kv4-B32-ctx256": (33.07, 28.43, 26.71), "h8kv4-B32-ctx512": (62.30, 53.71, 49.47),
    "h8kv4-B64-ctx128": (25.68, 21.23, 18.19), "h8kv4-B64-ctx256": (47.83, 39.02, 32.00),
    "h8kv4-B128-ctx256": (91.14, 74.83, 61.44),
}
# Its split-k inner-loop fix (B32 T1024), us: (shape, before, after).
POST_H200_SPLIT_K_FIX_US = ("h8kv4-B32-ctx1k", 235.11, 81.03)
# Its prefill of B32-T256-H8-Hkv4 (printed in ms: 0.584, 0.219, 0.165, 0.052), us, in the order it
# took them: (key, its kernel as lesson 06's README names it, as plots/TABLES.md names it, us).
POST_H200_PREFILL_SHAPE = "B32-T256-H8-Hkv4"
POST_H200_PREFILL_US = (("mma_sync", "MMA (mma.sync)", "MMA (mma.sync)", 584),
                        ("wgmma_first", "WGMMA, first correct version", "WGMMA, first version", 219),
                        ("wgmma_fragment", "WGMMA, FIR gate from the fragment, m64n16", "WGMMA, gate from the fragment", 165),
                        ("fa3", "FA3 (softmax)", "FA3 (softmax)", 52))
# Its sparse-P gains over the dense PV, % (sections 1.3 and 7.4): zero-skip, compaction, and
# compaction added to its split-k kernel (up to, on some shapes, against that kernel without it).
POST_H200_SPARSE_GAIN = {"zero_skip": 2.0, "compaction": 30.0, "split_k_compact": 80.0}

# ---------------------------------------------------------------------------------------
# Variants: the names the lessons' programs give their steps (--variant), as the tables
# group them, and the targets they are held to

# The L4 post's single-pass times (POST_L4_MS) in the order lesson 01's table lists them.
LESSON01_POST_SHAPES = ("llama7b-B1-ctx1k", "llama70b-B4-ctx2k", "mqa-B16-ctx4k")

# Lesson 02's ladder: (step, family, has a TGS). A family with a TGS is the variants
# <family>_tgs4/8/16; step 6 is one idea with two mappings. The steps with one variant each
# (3-5, 7, 8) are in the ladder table (lesson02_ladder_steps).
LESSON02_STEPS = [("1", "thread_groups", True), ("2", "wide_loads", True), ("6", "per_head", True),
                  ("6", "grouped", True), ("9", "grouped_mma", False), ("10", "grouped_mma_ws", False),
                  ("11", "grouped_mma_bulk", False), ("12", "grouped_mma_units", False),
                  ("13", "grouped_mma_aligned", False), ("14", "grouped_mma_two_streams", False)]


# Lesson 02 steps that refuse some catalogue shapes by design (step 14: groups above 8); a
# table shows "-" for them there instead of asking the CSV for the row.
LESSON02_REFUSING = frozenset({"grouped_mma_two_streams"})


def family_variants(family, has_tgs):
    """A step family's variant names: one per TGS (family_tgs4, ...) or the family's name alone."""
    return [f"{family}_tgs{t}" for t in TGS] if has_tgs else [family]


# Every lesson 02 step variant, in step order.
LESSON02_STEP_VARIANTS = [v for _, fam, tgs in LESSON02_STEPS for v in family_variants(fam, tgs)]

# Lesson 03: every split-k variant of lesson03_sweep.csv, the published rules (auto row's columns),
# the ladder's steps (lesson03.csv) and the fixed partition sizes.
LESSON03_SPLIT = ["split_k_64", "split_k_128", "split_k_256", "split_k_512", "split_k_1024", "split_k_4096",
                  "split_k_fused_128", "split_k_fused_512", "split_k_rows_64", "split_k_rows_128", "split_k_rows_256",
                  "split_k_rows_512", "split_k_rows_1024",
                  "split_k_units_64", "split_k_units_128", "split_k_units_256", "split_k_units_512", "split_k_units_1024",
                  "split_k_units_2048", "split_k_units_4096", "split_k_units_8192", "split_k_units_fused_128",
                  "split_k_units_fused_512", "split_k_rows_units_128", "split_k_rows_units_256", "split_k_rows_units_512",
                  "split_k_rows_units_1024", "split_k_units_lpt_1024", "split_k_units_lpt_2048",
                  "split_k_units_lpt_4096", "split_k_units_lpt_8192", "split_k_even"]
LESSON03_RULES = [("post 1", "rule_post1"), ("post 2", "rule_post2"), ("vLLM", "rule_vllm"),
                  ("split count", "rule_split_count")]
LESSON03_LADDER = ["single_pass", "partitions", "fused_merge", "tensor_cores", "longest_first", "unit_copies",
                   "head_rows", "flat_merge", "cluster_merge", "auto"]
LESSON03_FIXED = ["split_k_128", "split_k_256", "split_k_512", "split_k_1024", "split_k_4096"]

# Lesson 04: the reduce's fixes, the sweep's batches and the segment counts the table shows (the
# smallest, and each side of every power of two from 16); the --plans run's fixed sizes and peers.
LESSON04_FIXES = ("pad_scratch", "pow2_lanes", "loop")
LESSON04_BATCHES = (16, 1)
LESSON04_SPLITS = (1, 2, 3, 16, 17, 32, 33, 64, 65, 128, 129, 256, 257, 512, 513, 1023, 1024)
LESSON04_PLAN_FIXED = ("split_pow2_128", "split_pow2_256", "split_pow2_512", "split_pow2_1024", "split_pow2_4096")
LESSON04_PEERS = ("flashinfer_decode", "flashinfer_decode_tc")

# Lesson 05: its steps, those that compact, and those that run on sm_90 only (a CSV of another GPU
# has no such rows).
LESSON05_STEPS = ("dense", "zero_skip", "compact_atomic", "compact_ordered", "split_k_compact", "split_k_cluster",
                  "branchless_gate")
LESSON05_COMPACTION = ("compact_atomic", "compact_ordered", "split_k_compact", "split_k_cluster", "branchless_gate")
LESSON05_HOPPER = ("split_k_cluster",)

# Lesson 06: the methods its results table shows (variant <method>_<policy>; steps 1, 2, 3, 9 and
# the last, 21: every step is in the ladder table, lesson06_ladder_steps), the methods built for
# sm_90a only, and the H200 post's prefill kernels (POST_H200_PREFILL_US) beside the variant that
# does the same thing (FA3: the last step's softmax; its persistent CTAs are FA3's too).
LESSON06_METHODS = ("as_decode", "mma_sync", "wgmma", "wgmma_ws", "wgmma_v_pages")
LESSON06_POLICIES = ("softmax", "gate")
LESSON06_HOPPER = ("wgmma", "wgmma_swizzle", "wgmma_tma", "wgmma_producer", "wgmma_setmaxnreg", "wgmma_overlap",
                   "wgmma_ws", "wgmma_persistent", "wgmma_fast_exp2", "wgmma_early_start",
                   "wgmma_lazy_rescale", "wgmma_diagonal_mask", "wgmma_paired_stores",
                   "wgmma_q_registers", "wgmma_work_ahead", "wgmma_tma_store", "wgmma_folded_gate",
                   "wgmma_tree_max", "wgmma_v_pages")
LESSON06_POST_OURS = {"mma_sync": "mma_sync_gate", "wgmma_first": "wgmma_gate", "wgmma_fragment": "wgmma_gate",
                      "fa3": "wgmma_v_pages_softmax"}

# Lesson 07: lesson07_kv_staging runs per_token up to this many tokens (kPerTokenMaxTokens); its
# stages; the variants as the tables list them: the one-GPU ones every run has, then the two-GPU
# ones (prefill ranks on GPU 0, decode ranks on GPU 1), which a run with one GPU cannot make.
LESSON07_PER_TOKEN_MAX = 4096
LESSON07_STAGES = ("gather", "transfer", "scatter", "total")
LESSON07_ONE_GPU = ("per_layer", "staged")
LESSON07_TWO_GPU = ("staged_peer", "staged_nccl")
LESSON07_NEEDS = {"memcpy_peer": "two GPUs", "staged_peer": "two GPUs",
                  "staged_nccl": "two GPUs and a build with NCCL"}
# The targets for lesson 07, checked against the data (not measured here).
LESSON07_KERNEL_TARGET_PCT, LESSON07_KERNEL_AIM_PCT = 85.0, 90.0
LESSON07_SPEEDUP_TARGET, LESSON07_SPEEDUP_TOKENS = 20.0, 4096
LESSON07_PEER_TARGET_PCT = 80.0

# The ladder tables: lesson -> (folder, CSV, headline shape, sigma (05) or prefix (06)).
LADDERS = {
    "02": ("02_thread_groups", "lesson02.csv", "llama70b-B4-ctx2k", None),
    "03": ("03_split_k", "lesson03.csv", "mqa-B64-ctx2k", None),
    "05": ("05_sparse_p", "lesson05.csv", "h8kv4-B64-ctx1k", "1.5"),
    "06": ("06_wgmma_prefill", "lesson06.csv", "B4-T4096-H32-Hkv8", "0"),
}
# arch_matrix.csv's configurations: (build, cap_kib, column heading).
ARCH_CONFIGS = [
    ("native", "none", "H100, H200 (sm_90a build)"),
    ("sm80", "163", "A100 (sm_80 code, 163 KiB)"),
    ("sm80", "99", "RTX 30xx/40xx, A10, L4 (sm_80 code, 99 KiB)"),
]
