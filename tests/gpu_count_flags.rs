//! A total GPU count as torchrun and Slurm users type it (`--gpus`, `--num-gpus`, `--world-size`)
//! is not a tpsim flag (a cluster is `--nodes` of `--gpus-per-node`); clap used to answer with a
//! tip for `--gpu`, the GPU type. It is refused with the flag as typed and the `--nodes` that gives
//! that many GPUs on the GPU in question, by every command that sizes a cluster.

mod common;

use common::*;

#[test]
fn a_gpu_count_is_answered_with_the_nodes_that_give_it() {
    let cases: [(&[&str], &[&str]); 5] = [
        (
            &["plan", "--model", "llama3-70b", "--gpus", "128"],
            &[
                "--gpus 128:",
                "8 per node on h100-sxm-80g",
                "give --nodes 16",
            ],
        ),
        (
            &["plan", "--model", "llama3-70b", "--num-gpus", "100"],
            &[
                "--num-gpus 100:",
                "--nodes 12 (96 GPUs) or --nodes 13 (104 GPUs)",
            ],
        ),
        (
            &[
                "eval",
                "--model",
                "llama3-8b",
                "--world-size",
                "4",
                "--tp",
                "4",
            ],
            &["--world-size 4:", "--nodes 1 --gpus-per-node 4"],
        ),
        (
            &[
                "plan",
                "--model",
                "llama3-70b",
                "--gpu",
                "gb200-nvl72",
                "--gpus",
                "64",
            ],
            &["4 per node on gb200-nvl72", "give --nodes 16"],
        ),
        (
            &[
                "sweep",
                "--model",
                "llama3-70b",
                "--gpus",
                "64",
                "--axis",
                "seq-len",
                "--values",
                "2048,4096",
            ],
            &["--gpus 64:", "give --nodes 8"],
        ),
    ];
    for (args, needles) in cases {
        let r = run(args);
        assert_one_line_error(&r, needles, &["--gpu ", "tip:"], &args.join(" "));
    }
}

/// Beside --nodes a total count only repeats or contradicts it: the fix is to drop it, not to give
/// the --nodes already given.
#[test]
fn a_gpu_count_beside_nodes_is_said_to_repeat_or_contradict_it() {
    let r = run(&[
        "plan",
        "--model",
        "llama3-70b",
        "--gpus",
        "8",
        "--nodes",
        "1",
    ]);
    assert_one_line_error(
        &r,
        &["--gpus 8 repeats --nodes 1 of 8 GPUs", "drop --gpus"],
        &["give --nodes"],
        "--gpus 8 --nodes 1",
    );
    let r = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--world-size",
        "16",
        "--nodes",
        "1",
        "--tp",
        "8",
    ]);
    assert_one_line_error(
        &r,
        &[
            "--world-size 16 contradicts --nodes 1 of 8 GPUs (8 GPUs",
            "drop --world-size",
        ],
        &["give --nodes"],
        "--world-size 16 --nodes 1",
    );
}
