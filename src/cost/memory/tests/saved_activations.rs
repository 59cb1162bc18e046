//! Activation tests: Korthikanti et al. 2022's per-layer expressions and table, and what
//! wide heads, dropout, FlashAttention, FP8, eager kernels and per-op recompute change.

use super::*;

/// torchtitan's sequence parallelism keeps the gathered, full-length QKV and MLP inputs for the
/// backward (DTensor's column-parallel linears save what they were given); Megatron keeps the
/// sequence shard and gathers it again. Same training in every other respect: 2 inputs × 2
/// bytes × s·b·h·(1 − 1/t) more per layer.
#[test]
fn torchtitan_sequence_parallelism_keeps_the_gathered_inputs() {
    let model = crate::specs::load_model("llama3-8b").unwrap();
    let cluster = Cluster {
        gpu: crate::specs::load_gpu("h100-sxm-80g").unwrap(),
        nodes: 1,
        gpus_per_node: 8,
    };
    // One loss kernel for both, whose bytes loss_parallel does not change, so that only the
    // kept inputs differ.
    let titan = Training {
        loss: crate::training::LossKernel::Compiled,
        ..Training::with_framework(
            crate::training::TrainingFramework::Torchtitan,
            8192,
            8,
            AttentionKernel::Flash,
        )
    };
    let megatron_layout = Training {
        framework: crate::training::TrainingFramework::MegatronCore,
        ..titan
    };
    let request = crate::plan::PlanRequest {
        tp: 8,
        pp: 1,
        dp: 1,
        micro_batch: 1,
        sequence_parallel: true,
        ..crate::plan::PlanRequest::default()
    };
    let plan = ParallelPlan::build(&request, &model, &cluster, &titan).unwrap();
    let acts = |t: &Training| memory(&model, &cluster, t, &plan).activations_bytes.0;
    let want = 2.0 * 2.0 * 8192.0 * 4096.0 * (1.0 - 1.0 / 8.0) * 32.0;
    assert!(((acts(&titan) - acts(&megatron_layout)) / want - 1.0).abs() < 1e-9);
}

/// torchtitan's all-gather ring holds every rank's K/V chunk (repeated to the query heads), the
/// fp32 dQ/dK/dV accumulators and two fp32 dK/dV hops while a layer's attention backward runs;
/// on a stage without the loss that adds to the kept activations, on the only stage of Llama 3
/// 8B the larger fp32 logits peak already covers it.
#[test]
fn torchtitan_cp_ring_working_set_is_a_transient_peak() {
    let model = crate::specs::load_model("llama3-8b").unwrap();
    let cluster = Cluster {
        gpu: crate::specs::load_gpu("h100-sxm-80g").unwrap(),
        nodes: 2,
        gpus_per_node: 8,
    };
    let titan = Training::with_framework(
        crate::training::TrainingFramework::Torchtitan,
        262_144,
        8,
        AttentionKernel::Flash,
    );
    assert_eq!(titan.cp_exchange, CpExchange::TorchAllGather);
    let te_ring = Training {
        cp_exchange: CpExchange::KvRing,
        ..titan
    };
    let request = |pp: u32| crate::plan::PlanRequest {
        tp: 1,
        pp,
        cp: 8,
        dp: 2 / pp,
        micro_batch: 1,
        recompute: Recompute::Full,
        // torchtitan shards the states over the cp ranks whenever cp > 1 (FSDP2 over the
        // dp-shard x cp mesh), each data-parallel rank a copy.
        zero: 3,
        dp_replicas: 2 / pp,
        ..crate::plan::PlanRequest::default()
    };
    let acts = |t: &Training, plan: &ParallelPlan, stage: Stage| {
        stage_memory(&model, &cluster, t, plan, stage, 1)
            .activations_bytes
            .0
    };
    // 32,768 tokens a rank, 4,096 query and output columns: K/V 32768 x 8192 x 2 bytes a chunk.
    let kv = 32768.0 * 8192.0 * 2.0;
    let want = 8.0 * kv + 4.0 * 32768.0 * 3.0 * 4096.0 + 2.0 * 2.0 * kv;
    let piped = ParallelPlan::build(&request(2), &model, &cluster, &titan).unwrap();
    let added = acts(&titan, &piped, Stage::First) - acts(&te_ring, &piped, Stage::First);
    assert!((added / want - 1.0).abs() < 1e-9, "{added} vs {want}");
    let single = ParallelPlan::build(&request(1), &model, &cluster, &titan).unwrap();
    assert_eq!(
        acts(&titan, &single, Stage::Only),
        acts(&te_ring, &single, Stage::Only)
    );
}

#[test]
fn per_op_sac_keeps_the_saved_matmul_outputs() {
    // Llama 3 8B (h 4096, 32 heads, kv 1024, ffn 14336, gated), s = 8192, b = 1, no TP:
    // input 2sbh + Q 2sbh + V 2sb·1024 + SDPA output 2sbh + lse 4·32·sb + w1 output 2sb·14336
    // + w2 output 2sbh = sb·(8·4096 + 2·1024 + 128 + 2·14336).
    let m = crate::specs::load_model("llama3-8b").unwrap();
    let sb = 8192.0;
    let sac = alternate_matmul_activation_bytes(&m, 1, 8192, 1, false);
    let want = sb * (8.0 * 4096.0 + 2.0 * 1024.0 + 128.0 + 2.0 * 14336.0);
    assert!((sac / want - 1.0).abs() < 1e-12, "{sac} vs {want}");
    let none = layer_activation_bytes(
        &m,
        1,
        8192,
        1,
        false,
        Recompute::None,
        AttentionKernel::Flash,
    );
    let full = layer_activation_bytes(
        &m,
        1,
        8192,
        1,
        false,
        Recompute::Full,
        AttentionKernel::Flash,
    );
    assert!(full < sac && sac < none, "{full} < {sac} < {none}");
    // TP 8 with sequence parallelism: the block input is split, the two reduce-scatter
    // outputs are kept, the w2 partial sum stays full size.
    let tp8 = alternate_matmul_activation_bytes(&m, 1, 8192, 8, true);
    let want8 = sb
        * (2.0 * 4096.0 / 8.0
            + 2.0 * (4096.0 + 4096.0 + 14336.0) / 8.0
            + 2.0 * 128.0
            + 4.0 * 32.0 / 8.0
            + 2.0 * 4096.0
            + 4.0 * 4096.0 / 8.0);
    assert!((tp8 / want8 - 1.0).abs() < 1e-12, "{tp8} vs {want8}");
}

#[test]
fn korthikanti_per_layer_expressions() {
    // Korthikanti et al. 2022 Table 2, GPT-3 175B shape, s = 2048, b = 1, t = 8.
    let m = gpt3_175b();
    let (s, b, h, a, t) = (2048.0, 1.0, 12288.0, 96.0, 8.0);
    let sbh = s * b * h;
    let close =
        |ours: f64, paper: f64| assert!((ours / paper - 1.0).abs() < 1e-12, "{ours} vs {paper}");
    // no parallelism: sbh(34 + 5as/h)
    close(
        layer_activation_bytes(
            &m,
            1,
            2048,
            1,
            false,
            Recompute::None,
            AttentionKernel::Unfused,
        ),
        sbh * (34.0 + 5.0 * a * s / h),
    );
    // tensor parallel: sbh(10 + 24/t + 5as/(ht))
    close(
        layer_activation_bytes(
            &m,
            1,
            2048,
            8,
            false,
            Recompute::None,
            AttentionKernel::Unfused,
        ),
        sbh * (10.0 + 24.0 / t + 5.0 * a * s / (h * t)),
    );
    // tensor + sequence parallel: sbh/t (34 + 5as/h)
    close(
        layer_activation_bytes(
            &m,
            1,
            2048,
            8,
            true,
            Recompute::None,
            AttentionKernel::Unfused,
        ),
        sbh / t * (34.0 + 5.0 * a * s / h),
    );
    // tensor + sequence parallel + selective recompute: 34 sbh/t
    close(
        layer_activation_bytes(
            &m,
            1,
            2048,
            8,
            true,
            Recompute::Selective,
            AttentionKernel::Unfused,
        ),
        34.0 * sbh / t,
    );
    // tensor parallel + selective recompute: sbh(10 + 24/t)
    close(
        layer_activation_bytes(
            &m,
            1,
            2048,
            8,
            false,
            Recompute::Selective,
            AttentionKernel::Unfused,
        ),
        sbh * (10.0 + 24.0 / t),
    );
    // full recompute: 2sbh (÷t with sequence parallelism)
    close(
        layer_activation_bytes(
            &m,
            1,
            2048,
            8,
            false,
            Recompute::Full,
            AttentionKernel::Unfused,
        ),
        2.0 * sbh,
    );
    close(
        layer_activation_bytes(
            &m,
            1,
            2048,
            8,
            true,
            Recompute::Full,
            AttentionKernel::Unfused,
        ),
        2.0 * sbh / t,
    );
    // b scales linearly
    close(
        layer_activation_bytes(
            &m,
            4,
            2048,
            8,
            false,
            Recompute::None,
            AttentionKernel::Unfused,
        ),
        4.0 * sbh * (10.0 + 24.0 / t + 5.0 * a * s / (h * t)),
    );
}

#[test]
fn wide_heads_keep_q_and_the_projection_input_at_their_width() {
    // Qwen3-30B-A3B: 32 heads × 128 = 4096 wide on a 2048 hidden; DeepSeek-V3's latent
    // attention: Q 128 × 192, the projection input 128 × 128, and its latents (1536 + 512)
    // twice each.
    let (s, b, t) = (4096.0, 1.0, 2.0);
    let kept = |m: &Model| {
        layer_activation_bytes(
            m,
            1,
            4096,
            2,
            false,
            Recompute::None,
            AttentionKernel::Flash,
        )
    };
    let qwen = crate::specs::load_model("qwen3-30b-a3b").unwrap();
    let mut narrow = qwen.clone();
    narrow.head_dim = 64;
    narrow.kv_heads = 2;
    narrow.heads = 32;
    let extra = kept(&qwen) - kept(&narrow);
    // Q and the projection input 4096 instead of 2048; K and V 4 × 128 instead of 2 × 64; and
    // QK-norm's inputs, Q and K, at those widths.
    let expected = (2.0 * s * b * 2048.0 * 2.0
        + 4.0 * s * b * (512.0 - 128.0)
        + 2.0 * s * b * ((4096.0 + 512.0) - (2048.0 + 128.0)))
        / t;
    assert!((extra - expected).abs() < 1.0, "{extra} vs {expected}");
    let dsv3 = crate::specs::load_model("deepseek-v3").unwrap();
    let mut no_latents = dsv3.clone();
    no_latents.mla = None;
    no_latents.head_dim = 192;
    let with_latents = kept(&dsv3);
    let latents = 4.0 * s * b * (1536.0 + 512.0);
    let attention =
        (2.0 * s * b * (24576.0 + 16384.0) + 4.0 * s * b * 128.0 * (192.0 + 128.0) / 2.0) / t;
    let others =
        kept(&no_latents) - (2.0 * s * b * (24576.0 + 24576.0) + 4.0 * s * b * 128.0 * 192.0) / t;
    assert!(
        (with_latents - (others + attention + latents)).abs() < 1.0,
        "{with_latents} vs {}",
        others + attention + latents
    );
}

#[test]
fn no_dropout_and_flash_attention_drop_masks_and_scores() {
    // Without dropout: masks (2sbh outside TP, as²b) and the dropout output (2as²b) go; the
    // softmax output 2as²b stays. FlashAttention keeps only a 4-byte log-sum-exp per row per head.
    let mut m = gpt3_175b();
    m.dropout = false;
    let (s, h, a, t) = (2048.0, 12288.0, 96.0, 8.0);
    let sbh = s * h;
    let unfused = layer_activation_bytes(
        &m,
        1,
        2048,
        8,
        false,
        Recompute::None,
        AttentionKernel::Unfused,
    );
    assert!((unfused / (sbh * (8.0 + 24.0 / t) + 2.0 * a * s * s / t) - 1.0).abs() < 1e-12);
    let flash = layer_activation_bytes(
        &m,
        1,
        2048,
        8,
        false,
        Recompute::None,
        AttentionKernel::Flash,
    );
    assert!((flash / (sbh * (8.0 + 24.0 / t) + 4.0 * a * s / t) - 1.0).abs() < 1e-12);
}

#[test]
fn korthikanti_175b_selective_sp_fits_table() {
    // Korthikanti et al. 2022 §6.1: with SP + selective recompute the 175B per-layer activations
    // are 34·sbh/t; for s=2048, b=1, h=12288, t=8: 107 MB per layer.
    let m = gpt3_175b();
    let bytes = layer_activation_bytes(
        &m,
        1,
        2048,
        8,
        true,
        Recompute::Selective,
        AttentionKernel::Unfused,
    );
    assert!((bytes / 1e6 - 107.0).abs() < 0.5, "{bytes}");
}

#[test]
fn qk_norm_keeps_q_and_k_before_the_norm() {
    let model = crate::specs::load_model("qwen3-30b-a3b").unwrap();
    let mut plain = model.clone();
    plain.qk_norm = false;
    let kept = |m: &Model| {
        layer_activation_bytes(m, 1, 4096, 2, true, Recompute::None, AttentionKernel::Flash)
    };
    // Q (4096 wide) and K (512) in bf16, split over tp 2.
    assert_eq!(
        kept(&model) - kept(&plain),
        2.0 * 4096.0 * (4096.0 + 512.0) / 2.0
    );
}

#[test]
fn fp8_norm_outputs_save_a_byte_only_where_a_fused_gemm_quantizes_them() {
    // Llama: both norms fused into their GEMMs. Qwen3-30B-A3B (every layer MoE, no shared
    // experts): the router keeps the pre-MLP norm output in bf16. DeepSeek-V3: MLA's input
    // norm feeds two quantizing down projections; 58 of 61 MoE layers whose shared experts add
    // a quantized copy beside the router's bf16 one.
    let saving = |name: &str| norm_output_fp8_saving(&crate::specs::load_model(name).unwrap());
    assert_eq!(saving("llama3-8b"), 2.0);
    assert_eq!(saving("qwen3-30b-a3b"), 1.0);
    assert!((saving("deepseek-v3") - (3.0 - 58.0) / 61.0).abs() < 1e-12);
}

#[test]
fn fp8_saves_its_gemm_inputs_in_one_byte() {
    // Transformer Engine saves the quantized inputs of QKV and the two MLP GEMMs: one byte less
    // per element of each than bf16; the output projection's input is the attention output,
    // which the attention keeps in bf16; nothing else changes.
    let model = crate::model::tests::gpt3_175b();
    let cluster = Cluster {
        gpu: crate::specs::load_gpu("h100-sxm-80g").unwrap(),
        nodes: 16,
        gpus_per_node: 8,
    };
    let training = Training::with_framework(
        crate::training::TrainingFramework::MegatronCore,
        2048,
        256,
        AttentionKernel::Flash,
    );
    let plan = |precision| {
        let request = crate::plan::PlanRequest {
            tp: 8,
            pp: 8,
            dp: 2,
            micro_batch: 1,
            sequence_parallel: true,
            precision,
            ..crate::plan::PlanRequest::default()
        };
        ParallelPlan::build(&request, &model, &cluster, &training).unwrap()
    };
    let bf16 = memory(&model, &cluster, &training, &plan(Precision::Bf16));
    let fp8 = memory(&model, &cluster, &training, &plan(Precision::Fp8));
    let (s, h, f, t) = (2048.0, 12288.0, 49152.0, 8.0);
    // The two norm outputs (split by SP) and the MLP down projection's input.
    let per_layer = (2.0 * s * h + s * f) / t;
    let layers_in_flight = 12.0 * 8.0; // 96/8 layers on the first stage, p = 8 micro-batches in flight
    let saved = bf16.activations_bytes.0 - fp8.activations_bytes.0;
    assert!(
        (saved / (per_layer * layers_in_flight) - 1.0).abs() < 1e-9,
        "{saved}"
    );
}

#[test]
fn eager_kernels_keep_the_upcast_norm_inputs_expanded_kv_and_silu_output() {
    // Llama 3 8B, one GPU: two norms' fp32 inputs (4 bytes × 4096 each), silu's output (2 bytes
    // × 14336); and, compiled or eager, K and V expanded from 1024 to 4096 wide (2 bytes × 2 ×
    // 3072).
    let model = crate::specs::load_model("llama3-8b").unwrap();
    let eager_only = eager_saved_bytes_per_token(&model, 1, false, 0.0);
    assert_eq!(eager_only, 2.0 * 4.0 * 4096.0 + 2.0 * 14336.0);
    let expanded_kv = expanded_kv_saved_bytes_per_token(&model, 1);
    assert_eq!(expanded_kv, 4.0 * 3072.0);
    let per_token = eager_only + expanded_kv;
    // In a plan: added per layer when nothing is recomputed, not under per-op SAC.
    let cluster = Cluster {
        gpu: crate::specs::load_gpu("h100-sxm-96g-500w").unwrap(),
        nodes: 1,
        gpus_per_node: 8,
    };
    let framework = crate::training::TrainingFramework::Torchtitan;
    let eager = Training::with_framework(framework, 8192, 8, AttentionKernel::Flash);
    let mut fused = eager;
    fused.kernel_fusion = crate::training::KernelFusion::Fused;
    let plan = |recompute| {
        let request = crate::plan::PlanRequest {
            tp: 1,
            pp: 1,
            dp: 8,
            micro_batch: 1,
            zero: 3,
            recompute,
            ..crate::plan::PlanRequest::default()
        };
        ParallelPlan::build(&request, &model, &cluster, &eager).unwrap()
    };
    let kept = |training: &Training, recompute| {
        memory(&model, &cluster, training, &plan(recompute))
            .activations_bytes
            .0
    };
    let mut megatron_kernels = fused;
    megatron_kernels.sdpa_repeats_kv = false;
    let extra = kept(&eager, Recompute::None) - kept(&megatron_kernels, Recompute::None);
    assert!(
        (extra / (8192.0 * 32.0 * per_token) - 1.0).abs() < 1e-9,
        "{extra}"
    );
    // Compiled torchtitan still keeps the expanded K and V.
    let compiled = kept(&fused, Recompute::None) - kept(&megatron_kernels, Recompute::None);
    assert!(
        (compiled / (8192.0 * 32.0 * expanded_kv) - 1.0).abs() < 1e-9,
        "{compiled}"
    );
    assert_eq!(
        kept(&eager, Recompute::Selective),
        kept(&fused, Recompute::Selective)
    );
}
