//! Hostile input, round 4: defects an adversarial audit of the built binary found (misspelt
//! launch-line flags, wrong hints, locations that point nowhere, flags named by a value the user
//! never typed), one regression test each. Every error case checks exit 2, one line and the words
//! that name the value, the rule and the fix.

mod common;

use common::*;

const LAUNCH: &str = "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 2048 --global-batch-size 64 --micro-batch-size 1 --bf16";

fn eval_launch(extra: &str) -> Run {
    let line = format!("{LAUNCH} {extra}");
    run(&["eval", "--nodes", "1", "--megatron-args", &line])
}

/// A misspelt Megatron-LM flag, or another program's name for one tpsim reads, was skipped with a
/// note that it "does not change memory or time": `--tensor-model-paralel-size 8` evaluated tp 1,
/// where Megatron-LM's argparse (allow_abbrev=False) refuses the line.
#[test]
fn misspelt_or_foreign_launch_flags_are_refused_with_the_megatron_spelling() {
    for (extra, fix) in [
        (
            "--tensor-model-paralel-size 8",
            "did you mean --tensor-model-parallel-size?",
        ),
        ("--num-layer 16", "did you mean --num-layers?"),
        ("--sequence-paralel", "did you mean --sequence-parallel?"),
        (
            "--tensor-parallel-size 8",
            "write --tensor-model-parallel-size",
        ),
        ("--tp=8", "write --tensor-model-parallel-size"),
        ("--micro-batch 2", "write --micro-batch-size"),
        (
            "--pipeline-model-parallel-size 4 --virtual-pipeline-model-parallel-size 2",
            "write --num-virtual-stages-per-pipeline-rank",
        ),
        (
            "--model-parallel-size 8",
            "write --tensor-model-parallel-size",
        ),
    ] {
        let r = eval_launch(extra);
        let flag = extra
            .split_whitespace()
            .last()
            .filter(|w| w.starts_with("--"))
            .unwrap_or_else(|| extra.split_whitespace().rev().nth(1).unwrap());
        assert_one_line_error(&r, &[flag, "Megatron-LM", fix], &[], extra);
        assert!(!r.stdout.contains("plan: tp"), "{extra}: evaluated anyway");
    }
    // Megatron-LM arguments tpsim does not model are still skipped, a real one close to a flag
    // tpsim reads (--vocab-file, two edits from --vocab-size) among them.
    for extra in [
        "--vocab-file gpt2-vocab.json",
        "--lr 1e-4",
        "--data-path /data/x",
    ] {
        let r = eval_launch(extra);
        assert!(r.code == 0 || r.code == 1, "{extra}: {}", r.stderr);
        assert!(r.stderr.contains("were skipped"), "{extra}: {}", r.stderr);
    }
}

/// Virtual stages without a pipeline were refused as "--vpp 16 needs pipeline parallelism; use
/// --vpp 1": a flag and a value the user never typed, and a fix that is no Megatron-LM argument.
#[test]
fn virtual_stages_without_a_pipeline_name_the_flag_given() {
    let tp8 = "--tensor-model-parallel-size 8";
    for (extra, given) in [
        (
            "--num-layers-per-virtual-pipeline-stage 2",
            "--num-layers-per-virtual-pipeline-stage 2 makes 16 virtual stages",
        ),
        (
            "--num-virtual-stages-per-pipeline-rank 2",
            "--num-virtual-stages-per-pipeline-rank 2 makes 2 virtual stages",
        ),
    ] {
        let r = eval_launch(&format!("{tp8} {extra}"));
        assert_one_line_error(
            &r,
            &[given, "no pipeline", "pipeline size of 2 or more"],
            &["--vpp"],
            extra,
        );
    }
    let r = run(&[
        "eval",
        "--params",
        "7B",
        "--nodes",
        "1",
        "--tp",
        "8",
        "--pp",
        "1",
        "--num-layers-per-virtual-pipeline-stage",
        "2",
    ]);
    assert_one_line_error(
        &r,
        &["--num-layers-per-virtual-pipeline-stage 2", "no pipeline"],
        &["--vpp 17"],
        "eval --num-layers-per-virtual-pipeline-stage on pp 1",
    );
    // One virtual stage is no interleaving, which Megatron-LM accepts on any pipeline.
    let r = eval_launch(&format!("{tp8} --num-virtual-stages-per-pipeline-rank 1"));
    assert_eq!(r.code, 0, "{}", r.stderr);
}

/// Megatron-LM refuses the interleaved schedule on two pipeline ranks without p2p overlap
/// ("pipeline-model-parallel size should be greater than 2"); the pasted line was evaluated.
#[test]
fn interleaving_two_ranks_without_p2p_overlap_is_refused_as_megatron_does() {
    let line = "--tensor-model-parallel-size 4 --pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2";
    let r = eval_launch(&format!("{line} --no-overlap-p2p-communication"));
    assert_one_line_error(
        &r,
        &[
            "--no-overlap-p2p-communication",
            "--pipeline-model-parallel-size 2",
            "greater than 2",
            "pipeline size of 3 or more",
        ],
        &[],
        "pp 2 vpp 2 without p2p overlap",
    );
    assert_eq!(eval_launch(line).code, 0, "with p2p overlap it runs");
}

/// `validate --backend cpu` on a 7B model at --seq-len 128 said "use a shorter --seq-len ..., e.g.
/// --seq-len 128": the value already given, for a layer whose weights alone are over the cap.
#[test]
fn a_cpu_layer_too_wide_for_memory_names_the_width_not_the_sequence() {
    let r = run(&[
        "validate",
        "--params",
        "7B",
        "--backend",
        "cpu",
        "--seq-len",
        "128",
        "--tp",
        "2",
    ]);
    assert_one_line_error(
        &r,
        &[
            "hidden 4096",
            "weights and their gradients alone",
            "narrower model",
            "--hidden 256",
        ],
        &["shorter --seq-len"],
        "validate a 7B layer on the CPU",
    );
    // A narrow layer with a long sequence still gets the sequence hint.
    let r = run(&[
        "validate",
        "--layers",
        "2",
        "--hidden",
        "256",
        "--heads",
        "8",
        "--backend",
        "cpu",
        "--seq-len",
        "100000",
        "--tp",
        "2",
    ]);
    assert_one_line_error(
        &r,
        &["100000 tokens", "seq_len^2", "shorter --seq-len"],
        &["narrower model"],
        "validate a long sequence on the CPU",
    );
}

/// A YAML input of two documents (a `---` line) was refused at "f.yaml:0:0:", a location that
/// points nowhere, with no fix.
#[test]
fn a_yaml_input_of_two_documents_is_named_without_a_made_up_location() {
    let dir = scratch("round4", "two-documents");
    let plan = std::fs::read_to_string(format!("{ROOT}/plans/seed-512b-32nodes.yaml")).unwrap();
    std::fs::write(dir.join("two.yaml"), format!("{plan}---\n{plan}")).unwrap();
    let gpu = std::fs::read_to_string(format!("{ROOT}/clusters/h100-sxm-80g.yaml")).unwrap();
    std::fs::write(dir.join("gpu.yaml"), format!("{gpu}\n---\n{gpu}")).unwrap();
    for args in [
        vec!["eval", "--plan", "two.yaml", "--format", "json"],
        vec![
            "plan", "--params", "7B", "--nodes", "1", "--gpu", "gpu.yaml",
        ],
    ] {
        let r = run_in(&dir, &args);
        assert_one_line_error(
            &r,
            &["more than one YAML document", "`---`", "keep one document"],
            &[":0:0"],
            &format!("{args:?}"),
        );
        assert!(r.stdout.is_empty(), "{args:?}: {}", r.stdout);
    }
}

/// A config.json saved with a UTF-8 byte-order mark (Windows editors) was refused as "expected
/// value at line 1 column 1", which names neither the mark nor the fix.
#[test]
fn an_hf_config_with_a_byte_order_mark_says_so() {
    let dir = scratch("round4", "bom");
    let config = format!("{{{HF_SHAPE}, \"model_type\": \"llama\"}}");
    let r = eval_hf(&dir, "bom.json", &format!("\u{feff}{config}"));
    assert_one_line_error(
        &r,
        &["bom.json", "byte-order mark", "without BOM"],
        &["line 1 column 1"],
        "config.json with a BOM",
    );
    // The same text without the mark is read.
    let r = eval_hf(&dir, "plain.json", &config);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
}

/// `plan --save out.json` wrote YAML into a file whose name says JSON; now refused before any
/// work, as `sweep --chart x.png` is, and nothing is written. A name without an extension is kept.
#[test]
fn a_saved_plan_file_named_for_another_format_is_refused() {
    let dir = scratch("hostile_round4", "save_extension");
    let plan = ["plan", "--params", "7B", "--nodes", "1", "--top", "1"];
    let r = run_in(&dir, &[&plan[..], &["--save", "out.json"]].concat());
    assert_one_line_error(
        &r,
        &[
            "--save out.json",
            "YAML plan file",
            ".json",
            "name it .yaml",
        ],
        &[],
        "json",
    );
    assert!(!dir.join("out.json").exists());
    let r = run_in(&dir, &[&plan[..], &["--save", "mine"]].concat());
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(dir.join("mine").exists());
}

/// `--overlap-param-gather` with ZeRO-0 was echoed as "overlaps ... param gather" although a
/// ZeRO-0 plan gathers no parameters; the header now says the overlap is unused, and says it
/// is in effect where the distributed optimizer gathers.
#[test]
fn the_header_does_not_claim_a_parameter_gather_a_zero_0_plan_lacks() {
    let eval = [
        "eval", "--params", "2B", "--nodes", "1", "--tp", "1", "--dp", "8",
    ];
    let header = |zero: &str| {
        let r = run(&[&eval[..], &["--zero", zero, "--overlap-param-gather"]].concat());
        assert_eq!(r.code, 0, "{}", r.stderr);
        r.stdout
            .lines()
            .find(|l| l.starts_with("training:"))
            .unwrap()
            .to_string()
    };
    let zero0 = header("0");
    assert!(
        !zero0.contains("overlaps grad reduce, param gather"),
        "{zero0}"
    );
    assert!(
        zero0.contains("param gather overlap unused: with ZeRO-0 or one data-parallel rank"),
        "{zero0}"
    );
    let zero1 = header("1");
    assert!(zero1.contains("param gather"), "{zero1}");
    assert!(!zero1.contains("param gather overlap unused"), "{zero1}");
}

/// Interleaving with micro-batches that are not a multiple of pp said only "change --global-batch
/// or --micro-batch"; it now names the multiple (pp x dp x micro-batch), the nearest global batches
/// that work, and Megatron-Core's group-size option behind the rule, and the batch it suggests plans.
#[test]
fn interleaving_names_the_global_batches_that_work() {
    let eval = |batch: &str| {
        run(&[
            "eval",
            "--model",
            "llama3-8b",
            "--nodes",
            "4",
            "--tp",
            "8",
            "--pp",
            "2",
            "--vpp",
            "2",
            "--micro-batch",
            "1",
            "--global-batch",
            batch,
        ])
    };
    let r = eval("6");
    assert_one_line_error(
        &r,
        &[
            "--vpp 2: 3 micro-batches are not a multiple of --pp 2",
            "--microbatch-group-size-per-virtual-pipeline-stage",
            "multiple of pp x dp x micro-batch = 4 sequences",
            "--global-batch 4 or 8",
        ],
        &[],
        "vpp",
    );
    for batch in ["4", "8"] {
        let r = eval(batch);
        assert!(r.code == 0 || r.code == 1, "{batch}: {}", r.stderr);
    }
}

/// The JSON's `training.overlap` echoed what was asked for (`tp_comm: true` for a plan without
/// sequence parallelism, `param_gather: true` under ZeRO-0) with nothing saying what took effect;
/// each plan now carries `overlap_applied`, by the estimate's own rules, and the header lists no
/// p2p overlap for a plan without a pipeline.
#[test]
fn each_plan_says_which_overlap_takes_effect() {
    let eval = [
        "eval", "--params", "2B", "--nodes", "1", "--tp", "2", "--dp", "4", "--zero",
    ];
    let out = json(&[&eval[..], &["0", "--format", "json"]].concat());
    assert_eq!(out["training"]["overlap"]["tp_comm"], true, "{out}");
    let applied = &out["plans"][0]["overlap_applied"];
    assert_eq!(applied["tp_comm"], false, "{applied}");
    assert_eq!(applied["param_gather"], false, "{applied}");
    assert_eq!(applied["p2p"], false, "{applied}");
    assert_eq!(applied["grad_reduce"], true, "{applied}");
    let sp = json(&[&eval[..], &["1", "--sequence-parallel", "--format", "json"]].concat());
    let applied = &sp["plans"][0]["overlap_applied"];
    assert_eq!(applied["tp_comm"], true, "{applied}");
    assert_eq!(applied["param_gather"], true, "{applied}");
    let r = run(&[&eval[..], &["0"]].concat());
    let header = r
        .stdout
        .lines()
        .find(|l| l.starts_with("training:"))
        .unwrap();
    assert!(!header.contains("interleaved p2p"), "{header}");
    assert!(header.contains("overlaps grad reduce"), "{header}");
}

/// A flag tpsim reads, given twice with different values: Megatron-LM's argparse keeps the last,
/// so tpsim does too, and says so instead of changing the value without a word.
#[test]
fn a_launch_flag_given_twice_is_named_with_both_values() {
    let r = eval_launch("--num-layers 40");
    // 0, or 1 when 40 layers do not fit on the node: either way the line was read.
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("given twice with different values; the last is used")
            && r.stderr.contains("then 40"),
        "{}",
        r.stderr
    );
    assert!(r.stdout.contains("40 layers"), "{}", r.stdout);
    // The same value twice changes nothing and is not worth a note.
    let same = eval_launch("");
    assert!(!same.stderr.contains("given twice"), "{}", same.stderr);
}
