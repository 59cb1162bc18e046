//! Regressions from the fifteenth review of valid usage by a new user: an ML infrastructure
//! engineer plans Qwen2.5, Qwen3 and Mixtral from Hugging Face configs, carries the winners to
//! `--emit nemo|deepspeed|megatron`, pastes their own Megatron-LM launch line, and reads the help
//! for the shape flags' defaults (each test names the finding).

mod common;
use common::run;

fn stdout_of(args: &[&str]) -> String {
    let r = run(args);
    assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
    r.stdout
}

fn stderr_of(args: &[&str]) -> String {
    let r = run(args);
    assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
    r.stderr
}

/// The value of `key: value` in a YAML fragment's lines (indentation ignored).
fn yaml_value<'a>(yaml: &'a str, key: &str) -> Option<&'a str> {
    yaml.lines().find_map(|line| {
        line.trim()
            .strip_prefix(key)
            .and_then(|rest| rest.strip_prefix(": "))
    })
}

/// `--emit nemo` wrote `bias: false` for Qwen2.5-7B and nothing of its q/k/v biases, and nothing
/// of Qwen3's per-head q/k norms: NeMo 1.x reads `add_qkv_bias = cfg.get('qkv_bias', False)` and
/// copies `qk_layernorm` from the model config by name (megatron_base_model.py
/// `build_transformer_config`; TransformerConfig's default False), so the merged config trained
/// without either, unlike the plan tpsim priced and the Megatron-LM line it writes for the same
/// model (`--add-qkv-bias`, `--qk-layernorm`). Both are now written.
#[test]
fn nemo_fragment_keeps_qwens_qkv_biases_and_qk_norms() {
    let emit = |config: &str| {
        stdout_of(&[
            "eval",
            "--hf-config",
            config,
            "--nodes",
            "2",
            "--global-batch",
            "256",
            "--tp",
            "2",
            "--sequence-parallel",
            "--micro-batch",
            "1",
            "--zero",
            "1",
            "--emit",
            "nemo",
        ])
    };
    let qwen2 = emit("models/hf/qwen2.5-7b.json");
    assert_eq!(yaml_value(&qwen2, "bias"), Some("false"), "{qwen2}");
    assert_eq!(yaml_value(&qwen2, "qkv_bias"), Some("true"), "{qwen2}");
    assert_eq!(yaml_value(&qwen2, "qk_layernorm"), Some("false"), "{qwen2}");
    let qwen3 = emit("models/hf/qwen3-8b.json");
    assert_eq!(yaml_value(&qwen3, "qkv_bias"), Some("false"), "{qwen3}");
    assert_eq!(yaml_value(&qwen3, "qk_layernorm"), Some("true"), "{qwen3}");
    let llama = emit("models/hf/llama-3-8b.json");
    assert_eq!(yaml_value(&llama, "qkv_bias"), Some("false"), "{llama}");
    assert_eq!(yaml_value(&llama, "qk_layernorm"), Some("false"), "{llama}");
    // The Megatron-LM line for the same models says the same.
    let line = |config: &str| {
        stdout_of(&[
            "eval",
            "--hf-config",
            config,
            "--nodes",
            "2",
            "--global-batch",
            "256",
            "--tp",
            "2",
            "--sequence-parallel",
            "--micro-batch",
            "1",
            "--zero",
            "1",
            "--emit",
            "megatron",
        ])
    };
    assert!(line("models/hf/qwen2.5-7b.json").contains(" --add-qkv-bias "));
    assert!(line("models/hf/qwen3-8b.json").contains(" --qk-layernorm "));
}

/// `--emit deepspeed` priced the plan with FlashAttention (its header line and `training:` say
/// so) but the Megatron-DeepSpeed launcher arguments it prints left out the switch that turns it
/// on: Megatron-DeepSpeed's ParallelAttention runs the flash kernel only with one of
/// `--use-flash-attn-v1|-v2|-triton` (megatron/model/transformer.py) and otherwise its
/// CoreAttention, which materialises the s x s scores. The arguments now carry
/// `--use-flash-attn-v2` (its example scripts' switch), and leave it out under `--attention
/// unfused`.
#[test]
fn deepspeed_launcher_turns_on_the_flash_attention_it_was_priced_with() {
    let base = [
        "plan",
        "--hf-config",
        "models/hf/qwen2.5-7b.json",
        "--nodes",
        "2",
        "--global-batch",
        "256",
        "--emit",
        "deepspeed",
    ];
    let launcher = |extra: &[&str]| {
        let mut args = base.to_vec();
        args.extend(extra);
        let stderr = stderr_of(&args);
        stderr
            .lines()
            .find(|l| l.contains("give Megatron-DeepSpeed"))
            .unwrap_or_else(|| panic!("no launcher note: {stderr}"))
            .to_string()
    };
    let flash = launcher(&[]);
    assert!(flash.ends_with(" --use-flash-attn-v2"), "{flash}");
    let unfused = launcher(&["--attention", "unfused"]);
    assert!(!unfused.contains("flash"), "{unfused}");
}

/// The `--rotary-base` token of a Megatron-LM line (None when the line writes none).
fn rotary_base(line: &str) -> Option<String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    words
        .iter()
        .position(|w| *w == "--rotary-base")
        .map(|i| words[i + 1].to_string())
}

/// The Hugging Face samples in models/hf/ are "trimmed to the keys `tpsim --hf-config` reads", but
/// the MoE ones had lost `rope_theta`, which the reader has taken since the rotary base reached
/// `--emit`: `--hf-config models/hf/mixtral-8x7b-v0.1.json --emit megatron` wrote no
/// `--rotary-base` (Megatron-LM's default 10000) where `--model mixtral-8x7b` writes the Hub's
/// 1000000, and so for Qwen3-30B-A3B and GPT-OSS-20B (150000). The samples carry the Hub's value
/// again, so a sample and the bundled model of the same name emit the same line.
#[test]
fn hf_samples_emit_the_rotary_base_their_bundled_models_do() {
    let emit = |model_flag: &str, model: &str, zero: &str| {
        stdout_of(&[
            "eval",
            model_flag,
            model,
            "--gpu",
            "b200-sxm-180g",
            "--nodes",
            "2",
            "--seq-len",
            "4096",
            "--global-batch",
            "64",
            "--tp",
            "1",
            "--ep",
            "4",
            "--micro-batch",
            "1",
            "--zero",
            zero,
            "--emit",
            "megatron",
        ])
    };
    for (sample, bundled, want) in [
        (
            "models/hf/mixtral-8x7b-v0.1.json",
            "mixtral-8x7b",
            "1000000",
        ),
        ("models/hf/qwen3-30b-a3b.json", "qwen3-30b-a3b", "1000000"),
        ("models/hf/gpt-oss-20b.json", "gpt-oss-20b", "150000"),
    ] {
        let from_sample = emit("--hf-config", sample, "1");
        let from_bundled = emit("--model", bundled, "1");
        assert_eq!(
            rotary_base(&from_bundled).as_deref(),
            Some(want),
            "{bundled}: {from_bundled}"
        );
        assert_eq!(
            rotary_base(&from_sample),
            rotary_base(&from_bundled),
            "{sample}: {from_sample}"
        );
    }
    // The two samples without a bundled twin, at their Hub configs' 1000000.
    for (sample, zero) in [
        ("models/hf/qwen1.5-moe-a2.7b.json", "1"),
        ("models/hf/glm-4.5-air.json", "3"),
    ] {
        let line = emit("--hf-config", sample, zero);
        assert_eq!(rotary_base(&line).as_deref(), Some("1000000"), "{sample}");
    }
}

/// `--ffn-hidden`'s help said "default: 4 x --hidden" (and models/README.md's key table
/// `4 * hidden`), but with a gated MLP the default is Megatron-LM's two-thirds of that, rounded
/// down to a multiple of 64: `--layers 32 --hidden 4096 --heads 32 --gated-mlp` plans ffn 10880,
/// not 16384. Both now state the gated rule, and the model line agrees with it.
#[test]
fn the_ffn_default_with_a_gated_mlp_is_documented_as_it_is_used() {
    let help = stdout_of(&["plan", "--help"]);
    let flag = help
        .split("\n      --")
        .find(|entry| entry.starts_with("ffn-hidden <"))
        .expect("--ffn-hidden in plan --help");
    let flat = flag.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains(
            "with --gated-mlp, Megatron-LM's 8 x --hidden / 3 rounded down to a multiple of 64"
        ),
        "{flat}"
    );
    let readme = std::fs::read_to_string("models/README.md").unwrap();
    let row = readme
        .lines()
        .find(|l| l.starts_with("| `ffn_hidden` |"))
        .expect("the ffn_hidden row");
    assert!(row.contains("int(8 * hidden / 3 / 64) * 64"), "{row}");
    let model_line = |gated: bool| {
        let mut args = vec![
            "eval",
            "--layers",
            "32",
            "--hidden",
            "4096",
            "--heads",
            "32",
            "--nodes",
            "1",
            "--global-batch",
            "64",
            "--tp",
            "8",
        ];
        if gated {
            args.push("--gated-mlp");
        }
        let out = stdout_of(&args);
        out.lines().next().unwrap().to_string()
    };
    let gated = model_line(true);
    let want = 4096 * 8 / 3 / 64 * 64;
    assert_eq!(want, 10880);
    assert!(
        gated.contains(&format!(", ffn {want}, gated MLP")),
        "{gated}"
    );
    assert!(model_line(false).contains(", ffn 16384,"));
}

/// A pasted Megatron-LM launch line without `--vocab-size` (Megatron-LM takes the vocabulary from
/// its tokenizer) was priced at tpsim's 51200-token default without a word, and the note listing
/// skipped arguments said its `--tokenizer-type`/`--tokenizer-model` "do not change memory or
/// time": a Llama 3 8B line came out 7.2B parameters, its embedding and output layer priced at
/// 40% of their size. The vocabulary tpsim took is now said in a note naming the line's tokenizer
/// and the fix, and the tokenizer flags are not listed as changing nothing; with `--vocab` beside
/// the line, or `--vocab-size` in it, nothing is said.
#[test]
fn launch_line_without_a_vocab_size_says_the_vocabulary_it_priced() {
    let line = "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --group-query-attention --num-query-groups 8 --ffn-hidden-size 14336 --swiglu --disable-bias-linear --normalization RMSNorm --position-embedding-type rope --untie-embeddings-and-output-weights --seq-length 8192 --tensor-model-parallel-size 2 --micro-batch-size 1 --global-batch-size 512 --sequence-parallel --recompute-activations --use-distributed-optimizer --bf16 --tokenizer-type HuggingFaceTokenizer --tokenizer-model meta-llama/Meta-Llama-3-8B --lr 3e-4";
    let r = run(&["eval", "--nodes", "4", "--megatron-args", line]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let note = r
        .stderr
        .lines()
        .find(|l| l.contains("no --vocab-size"))
        .unwrap_or_else(|| panic!("no vocabulary note: {}", r.stderr));
    for needle in [
        "51200",
        "--tokenizer-model meta-llama/Meta-Llama-3-8B",
        "--vocab N",
    ] {
        assert!(note.contains(needle), "{needle}: {note}");
    }
    let skipped = r
        .stderr
        .lines()
        .find(|l| l.contains("do not change memory or time"))
        .expect("the skipped-arguments note");
    assert!(skipped.ends_with("skipped: --lr"), "{skipped}");
    assert!(r.stdout.contains(", vocab 51200;"), "{}", r.stdout);
    // The vocabulary given beside the line: priced, and nothing to say.
    let r = run(&[
        "eval",
        "--nodes",
        "4",
        "--vocab",
        "128256",
        "--megatron-args",
        line,
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!r.stderr.contains("no --vocab-size"), "{}", r.stderr);
    assert!(r.stdout.contains(", vocab 128256;"), "{}", r.stdout);
    // ... or in it (the README's example script).
    let r = run(&[
        "eval",
        "--nodes",
        "16",
        "--megatron-args",
        "@examples/megatron/llama3-70b.sh",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!r.stderr.contains("no --vocab-size"), "{}", r.stderr);
}

/// `eval --hf-config models/hf/qwen2.5-7b.json --tp 8` answered "--tp 8 does not divide 28
/// attention heads; valid: 1, 2, 4, 7", and `--tp 7` then failed on the 4 KV heads (and the MLP
/// width 18944): each refusal listed what its own rule admits, so following one led into the
/// next. The heads, KV-heads and MLP-width refusals now list the degrees all three admit (inside
/// the NVLink domain), the ones `plan --tp 8` says the search offers.
#[test]
fn a_tp_refusal_lists_only_degrees_that_pass_every_head_rule() {
    let eval = |tp: &str| {
        run(&[
            "eval",
            "--hf-config",
            "models/hf/qwen2.5-7b.json",
            "--nodes",
            "1",
            "--global-batch",
            "64",
            "--micro-batch",
            "1",
            "--tp",
            tp,
        ])
    };
    let r = eval("8");
    common::assert_one_line_error(
        &r,
        &["--tp 8 does not divide 28 attention heads; valid: 1, 2, 4"],
        &["7"],
        "tp 8 on Qwen2.5-7B",
    );
    let listed = r
        .stderr
        .trim()
        .rsplit("valid: ")
        .next()
        .unwrap()
        .to_string();
    for tp in listed.split(", ") {
        let r = eval(tp);
        assert_ne!(
            r.code, 2,
            "--tp {tp}, which the refusal listed: {}",
            r.stderr
        );
    }
    // `plan` offers the same degrees.
    let r = run(&[
        "plan",
        "--hf-config",
        "models/hf/qwen2.5-7b.json",
        "--nodes",
        "1",
        "--global-batch",
        "64",
        "--tp",
        "8",
    ]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("(the search offers --tp 1, 2, 4)"),
        "{}",
        r.stderr
    );
}

/// `--attention unfused` prices the s x s scores materialised (Llama 3 8B at tp 8: 40.6 GiB and
/// 13.96 s against 23.8 GiB and 10.04 s with FlashAttention), and the Megatron-LM line says
/// `--attention-backend unfused`, but `--emit nemo` wrote nothing of it, so the merged config
/// ran NeMo 1.x's default `attention_backend: auto` (Transformer Engine's fused kernels). The
/// fragment now writes the kernel tpsim priced, as the Megatron-LM line does.
#[test]
fn nemo_fragment_runs_the_attention_kernel_tpsim_priced() {
    let emit = |target: &str, attention: &str| {
        stdout_of(&[
            "eval",
            "--model",
            "llama3-8b",
            "--nodes",
            "1",
            "--global-batch",
            "64",
            "--tp",
            "8",
            "--sequence-parallel",
            "--micro-batch",
            "1",
            "--zero",
            "1",
            "--attention",
            attention,
            "--emit",
            target,
        ])
    };
    for kernel in ["unfused", "flash"] {
        let nemo = emit("nemo", kernel);
        assert_eq!(
            yaml_value(&nemo, "attention_backend"),
            Some(kernel),
            "{nemo}"
        );
        let line = emit("megatron", kernel);
        assert!(
            line.contains(&format!(" --attention-backend {kernel} ")),
            "{line}"
        );
    }
}
