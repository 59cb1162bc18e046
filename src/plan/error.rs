//! [`PlanError`]: why a requested plan is not a plan, each message naming the value, the rule (with
//! its source in the framework's code) and a fix.

use super::sequence::{cp_sequence_multiple, seq_len_multiple_near};

/// The expert degrees above 1 a dense model was given (`--ep 2`, `--etp 2`, or both joined by
/// `sep`), each with `value` in place of its own when `value` is not empty (the fix: `--ep 1`):
/// an expert degree left at 1 was not given, so the message does not name it.
fn experts_on_dense_degrees(ep: u32, etp: u32, sep: &str, value: &str) -> String {
    [("--ep", ep), ("--etp", etp)]
        .into_iter()
        .filter(|(_, degree)| *degree > 1)
        .map(|(flag, degree)| {
            if value.is_empty() {
                format!("{flag} {degree}")
            } else {
                format!("{flag} {value}")
            }
        })
        .collect::<Vec<_>>()
        .join(sep)
}

/// Why a requested plan is not a plan.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    /// A plan a hybrid Mamba-Transformer stack cannot take, or that tpsim does not price for it
    /// (`check_hybrid`); the words name the value, the rule and a fix.
    #[error("{0}")]
    Hybrid(String),
    #[error(
        "{what} 0 is not a degree; every parallel degree and the micro-batch must be at least 1, so give {what} 1 or more"
    )]
    ZeroDegree { what: &'static str },
    #[error(
        "--tp {tp} x --cp {cp} x --pp {pp} x --dp {dp} = {product} GPUs, but the cluster has {gpus}; choose degrees whose product is {gpus} ({suggest_dp})"
    )]
    GpuCount {
        tp: u32,
        cp: u32,
        pp: u32,
        dp: u32,
        product: u64,
        gpus: u32,
        suggest_dp: String,
    },
    #[error("--tp {tp} does not divide {heads} attention heads; valid: {valid}")]
    TpHeads { tp: u32, heads: u32, valid: String },
    #[error(
        "{flag} {tp} does not divide the {what} {ffn} (Megatron and DeepSpeed split it evenly over the ranks, and tpsim models even splits); valid: {valid}"
    )]
    TpFfn {
        flag: &'static str,
        tp: u32,
        what: &'static str,
        ffn: u32,
        valid: String,
    },
    #[error(
        "--tp {tp} neither divides nor is a multiple of the {kv_heads} KV heads (Megatron replicates KV heads only when tp is a multiple); valid: {valid}"
    )]
    TpKvHeads {
        tp: u32,
        kv_heads: u32,
        valid: String,
    },
    #[error(
        "--tp {tp} does not divide the {gpus_per_node} GPUs of an NVLink domain; valid: {valid}"
    )]
    TpNode {
        tp: u32,
        gpus_per_node: u32,
        valid: String,
    },
    #[error(
        "--tp {tp} spans NVLink domains ({gpus_per_node} GPUs per domain): tensor-parallel all-reduces would cross the network every layer; use --tp {gpus_per_node} or less, or pass --allow-cross-node-tp"
    )]
    TpCrossNode { tp: u32, gpus_per_node: u32 },
    #[error(
        "--pp {pp} is larger than the model's {layers} layers; a stage needs at least one layer: give --pp {layers} or fewer (and more --dp for the GPUs it frees)"
    )]
    PpLayers { pp: u32, layers: u32 },
    #[error(
        "--pp {pp} does not split {layers} layers evenly; pass --allow-uneven-pp or use one of: {valid}"
    )]
    PpUneven { pp: u32, layers: u32, valid: String },
    #[error(
        "--pp {pp} leaves a stage without a transformer layer: the model's {layers} layers, with the embedding and the output layer counted as one each, spread over {pp} stages give one of them nothing but the embedding or the output layer; use a smaller --pp, valid here: {valid}"
    )]
    EmptyStage { pp: u32, layers: u32, valid: String },
    #[error(
        "a first/last stage split (--decoder-first/last-pipeline-num-layers) needs --pp 2 or more and --vpp 1 (here --pp {pp}, --vpp {vpp}); drop the split or the interleaving"
    )]
    StageSplitNeeds { pp: u32, vpp: u32 },
    #[error(
        "first stage {first} and last stage {last} layers do not split {layers} layers over --pp {pp}: the middle stages must get the rest in equal, non-empty parts (and the end stages at least one layer each); change the two counts"
    )]
    StageSplitUneven {
        first: u32,
        last: u32,
        layers: u32,
        pp: u32,
    },
    #[error("--vpp {vpp} needs pipeline parallelism (--pp > 1); use --vpp 1")]
    VppWithoutPp { vpp: u32 },
    #[error(
        "--pp-schedule {schedule} runs exactly two model chunks per GPU in a V (PyTorch refuses any other count), but --vpp is {vpp}; give --vpp 2"
    )]
    VScheduleChunks { schedule: &'static str, vpp: u32 },
    #[error(
        "--cpu-offload-layers {layers} with --pp {pp}: Megatron-Core offloads activations only without a pipeline (transformer_config.py: \"no support for Pipeline parallelism with CPU offloading\"); give --pp 1, or drop --cpu-offload-layers"
    )]
    CpuOffloadWithPipeline { layers: u32, pp: u32 },
    #[error(
        "--num-layers-at-{end}-in-bf16 {count} with --pp {pp}: Megatron-Core keeps at most one stage's layers ({max} of {layers}) in bf16 at each end under FP8 (transformer_config.py: \"must be between 0 and number of layers per pipeline stage\"); give --num-layers-at-{end}-in-bf16 {max} or fewer, or a smaller --pp"
    )]
    Bf16LayersPastStage {
        end: &'static str,
        count: u32,
        pp: u32,
        max: u32,
        layers: u32,
    },
    #[error(
        "--first-last-layers-bf16 with --fp8-scaling delayed: Megatron-Core refuses bf16 layers under delayed scaling (transformer_config.py: \"Delayed scaling does not support first / last layer in BF16\"); give --fp8-scaling current, or drop --first-last-layers-bf16"
    )]
    Bf16LayersWithDelayedScaling,
    #[error(
        "--cpu-offload-layers {layers} with --recompute {recompute}: Megatron-Core offloads activations only without recompute (transformer_config.py: \"CPU offloading does not work when activation recomputation is enabled\"); give --recompute none, or drop --cpu-offload-layers"
    )]
    CpuOffloadWithRecompute {
        layers: u32,
        recompute: &'static str,
    },
    #[error(
        "--pp-schedule dualpipev needs at least as many micro-batches per pipeline schedule as stages, 2 x --pp {pp} = {need} (PyTorch's ScheduleDualPipeV refuses fewer), but it runs {per_schedule}; raise --global-batch (or --local-batch), lower --micro-batch or --dp, or use --pp-schedule zbv"
    )]
    DualPipeVMicrobatches {
        per_schedule: u32,
        need: u32,
        pp: u32,
    },
    #[error(
        "--pp-schedule {schedule} runs two model chunks of whole layers per GPU (--vpp 2), but --pp {pp} {split}; give a --pp whose stages split in two, valid: {valid}"
    )]
    VScheduleLayers {
        schedule: &'static str,
        pp: u32,
        /// How the depth lays the layers out: "leaves 3 layers on each stage", or the uneven
        /// split that makes no equal chunks.
        split: String,
        valid: String,
    },
    #[error(
        "--vpp {vpp} does not divide the {per_stage} layers of each stage{unequal}; valid: {valid}"
    )]
    VppLayers {
        vpp: u32,
        per_stage: u32,
        valid: String,
        /// Why unequal chunks are not offered instead, where the framework is the reason.
        unequal: String,
    },
    /// More model chunks than a stage has layers, where the framework takes unequal chunks: the
    /// divisors of the stage are not the rule here (`VppLayers`), every count up to it is.
    #[error(
        "--vpp {vpp} cuts each stage's {per_stage} layers into {vpp} model chunks, more than it has layers (every chunk holds at least one; {framework} takes chunks of unequal size, so any count up to the stage's layers works); give --vpp {per_stage} or fewer, valid: 1 to {per_stage}"
    )]
    VppPastStageLayers {
        vpp: u32,
        per_stage: u32,
        framework: &'static str,
    },
    #[error(
        "--vpp {vpp} with an uneven split needs layers + 2 (embedding and loss counted as layers, MTP layers too or not) to split evenly into pp x vpp chunks, or pp x vpp chunks filled front to back with a non-empty last one; valid here: {valid}"
    )]
    VppUneven { vpp: u32, valid: String },
    #[error(
        "--vpp {vpp}: {num_microbatches} micro-batches are not a multiple of --pp {pp} (Megatron-Core's interleaved schedule requires it with its default --microbatch-group-size-per-virtual-pipeline-stage, pp, the schedule tpsim simulates); give a --global-batch that is a multiple of pp x dp x micro-batch = {multiple} sequences (e.g. {examples}), or another --micro-batch"
    )]
    VppMicrobatches {
        vpp: u32,
        num_microbatches: u32,
        pp: u32,
        multiple: u64,
        /// The nearest global batches that work, below and above.
        examples: String,
    },
    #[error(
        "--vpp {vpp}: each of the step's {runs} pipeline schedules (one per local batch) runs {per_schedule} micro-batches, not a multiple of --pp {pp} (tpsim's interleaved schedule requires it); give a --local-batch that is a multiple of --pp x --micro-batch = {multiple} sequences"
    )]
    VppScheduleMicrobatches {
        vpp: u32,
        per_schedule: u32,
        runs: u32,
        pp: u32,
        multiple: u32,
    },
    #[error("--local-batch {local_batch}: {rule}")]
    LocalBatch { local_batch: u32, rule: String },
    /// dp itself does not divide the batch: no micro-batch can help, so the rule is said once,
    /// with what can (a runs file's row said it twice, as `BatchSplit` and again in its list).
    #[error(
        "--global-batch {global_batch} is not divisible by --dp {dp}, so no micro-batch size splits it; give a multiple of {dp} (e.g. --global-batch {multiple}) or degrees whose dp divides {global_batch}"
    )]
    BatchNotDivisibleByDp {
        global_batch: u32,
        dp: u32,
        /// The next global batch dp divides.
        multiple: u64,
    },
    #[error(
        "--global-batch {global_batch} is not divisible by --dp {dp} x --micro-batch {micro_batch} = {product}; valid micro-batches for this dp: {valid}"
    )]
    BatchSplit {
        global_batch: u32,
        dp: u32,
        micro_batch: u32,
        product: u64,
        valid: String,
    },
    #[error(
        "--cp {cp} does not split the {seq_len}-token sequence into 2 x cp equal chunks (Megatron-Core's causal load balancing gives each rank chunks i and 2cp-1-i); valid: {valid}; pin one of those, or give a --seq-len that is a multiple of {chunks} (e.g. --seq-len {longer})"
    )]
    CpSequence {
        cp: u32,
        seq_len: u32,
        valid: String,
        /// 2·cp, the multiple the sequence must be.
        chunks: u64,
        /// The next sequence length that `cp` splits.
        longer: u64,
    },
    #[error(
        "--cp {cp} does not split the {seq_len}-token sequence into cp equal shards (DeepSpeed-Ulysses gives each sequence-parallel rank seq/cp contiguous tokens: Megatron-DeepSpeed's get_batch asserts seq_length % sequence_parallel_size == 0); valid: {valid}; pin one of those, or give a --seq-len that is a multiple of {cp} (e.g. --seq-len {longer})"
    )]
    UlyssesSequence {
        cp: u32,
        seq_len: u32,
        valid: String,
        /// The next sequence length that `cp` splits.
        longer: u64,
    },
    #[error(
        "--cp {cp} with sliding-window attention: the {exchange} exchange does not run sliding windows (Transformer Engine refuses them on its point-to-point ring, and PyTorch's ring takes none); use {windowed}, --cp 1, or --attention-window 0 for full attention"
    )]
    CpWithWindow {
        cp: u32,
        exchange: &'static str,
        /// The exchanges that run windows, as the framework takes them ([`PlanError::cp_with_window`]).
        windowed: &'static str,
    },
    #[error(
        "--cp {cp} with --cp-exchange head-all-to-all (Megatron-Core's --cp-comm-type a2a) splits each TP rank's heads over the CP ranks, but tp {tp} leaves {query_heads} query and {kv_heads} K/V heads per rank, not both multiples of {cp} (Transformer Engine's AttnFuncWithCPAndQKVOA2A requires it); valid cp: {valid}; or use --cp-exchange {other}"
    )]
    CpHeads {
        cp: u32,
        tp: u32,
        query_heads: u32,
        kv_heads: u32,
        valid: String,
        /// The exchanges without the rule that run this model: not the ring where it has
        /// sliding windows (`CpWithWindow`).
        other: &'static str,
    },
    #[error(
        "--cp {cp} with --attention unfused: context parallelism runs inside the fused attention kernels (Megatron-Core: the K/V ring of Transformer Engine's `AttnFuncWithCPAndKVP2P` calls the flash/cuDNN kernels; torchtitan: PyTorch's `context_parallel` over SDPA's flash, cuDNN and memory-efficient backends), which tpsim models; use --attention flash, or --cp 1"
    )]
    CpWithUnfusedAttention { cp: u32 },
    #[error(
        "--cp {cp} with --framework deepspeed (DeepSpeed-Ulysses, sequence_parallel_size {cp}) splits each TP rank's heads over the sequence-parallel ranks, but tp {tp} leaves {query_heads} query and {kv_heads} K/V heads per rank: the query heads must be a multiple of {cp}, and the K/V heads a multiple or a divisor of it (UlyssesSPAttentionHF repeats K/V heads up to {cp}); valid cp: {valid}"
    )]
    UlyssesHeads {
        cp: u32,
        tp: u32,
        query_heads: u32,
        kv_heads: u32,
        valid: String,
    },
    #[error(
        "--cp {cp} with {with_tp}--sequence-parallel under --framework deepspeed: Megatron-DeepSpeed refuses Megatron's sequence parallelism beside DeepSpeed's (\"not compatible with Megatron-LM's sequence parallel\"){tp_rule}; use {fix}--sequence-parallel false, or --cp 1"
    )]
    UlyssesWithSequenceParallel {
        cp: u32,
        /// "--tp 2 and " where a tp above 1 is given, else empty.
        with_tp: String,
        /// Why that tp goes too, else empty.
        tp_rule: String,
        /// "use --tp 1 and " where a tp above 1 is given, else empty.
        fix: String,
    },
    #[error(
        "--cp {cp} with {degrees} under --framework deepspeed: DeepSpeed-Ulysses runs without tensor or pipeline parallelism (Megatron-DeepSpeed's initialize_model_parallel asserts tp 1 and pp 1 when sequence_parallel_size > 1: \"does not work with tensor parallel or pipeline parallel\"; ALST's UlyssesSPAttentionHF wraps a Hugging Face model with neither); use {fix}, or --cp 1"
    )]
    UlyssesWithModelParallelism {
        cp: u32,
        /// "--tp 2", "--pp 4" or "--tp 2 and --pp 4".
        degrees: String,
        /// "--tp 1", "--pp 1" or "--tp 1 --pp 1".
        fix: String,
    },
    #[error(
        "--pp {pp} with a model whose output layer shares the input embedding (tied embeddings) under --framework torchtitan: torchtitan refuses weight tying with pipeline parallelism (its decoder's update_from_config raises \"Weight tying is not supported with Pipeline Parallel.\"); use --pp 1, an untied model (tied_embeddings: false), or --framework megatron-core"
    )]
    TiedEmbeddingsWithPp { pp: u32 },
    #[error(
        "--precision {precision} with --framework megatron-lm-2021: the 2021 Megatron-LM trains in fp16/bf16 only (FP8 came with Transformer Engine, in Megatron-Core); use --framework megatron-core, or --precision bf16"
    )]
    LowPrecisionIn2021 { precision: &'static str },
    #[error(
        "{}: expert parallelism needs a mixture-of-experts model ({model} is dense); use {}",
        experts_on_dense_degrees(*ep, *etp, " / ", ""),
        experts_on_dense_degrees(*ep, *etp, " ", "1")
    )]
    ExpertsOnDense { ep: u32, etp: u32, model: String },
    #[error(
        "--ep {ep} does not divide the model's {experts} experts (each expert-parallel rank holds experts/ep of them); valid: {valid}"
    )]
    EpExperts {
        ep: u32,
        experts: u32,
        valid: String,
    },
    #[error(
        "--ep {ep} x --etp {etp} does not divide the {stage_gpus} GPUs of a pipeline stage (tp x cp x dp), over which Megatron-Core folds the experts; choose ep x etp dividing {stage_gpus} (--etp defaults to --tp, as in Megatron-Core); with --etp {etp}, valid --ep: {valid_ep}"
    )]
    EpFolding {
        ep: u32,
        etp: u32,
        stage_gpus: u64,
        /// The --ep values that divide the experts and fold with this --etp ("1, 2, 4").
        valid_ep: String,
    },
    #[error(
        "--etp {etp} with --tp {tp} under --framework torchtitan: with --ep {ep} torchtitan {how}; use --etp {want}",
        how = if *ep > 1 {
            "keeps each routed expert whole on its expert-parallel ranks, drawn from dp_shard x cp x tp (no expert TP since #3167, \"deprecate expert tensor parallel (ETP)\", which removed expert_tensor_parallel_degree; before it parallel_dims.py said \"Currently we only support ETP=TP or ETP=1\")"
        } else {
            "splits every routed expert over the TP ranks as it splits a dense MLP (torchtitan/models/common/moe_sharding.py expert_param_placement_dense, \"EP disabled, TP > 1\")"
        }
    )]
    TorchtitanExpertTp {
        etp: u32,
        tp: u32,
        ep: u32,
        want: u32,
    },
    #[error(
        "--zero {zero} with --cp {cp} under --framework torchtitan: torchtitan shards the parameters, gradients and optimizer states with FSDP2 over the context-parallel ranks whenever cp > 1 (torchtitan/distributed/parallel_dims.py: `fsdp_enabled` is `dp_shard_enabled or cp_enabled`), so the states are not replicated there; use {fix}"
    )]
    TorchtitanReplicatedCp { zero: u8, cp: u32, fix: String },
    #[error(
        "--tp {tp} without --sequence-parallel on a mixture-of-experts model under --framework megatron-core: Megatron-Core refuses to train MoE layers under tensor parallelism without sequence parallelism (megatron/core/transformer/moe/moe_layer.py `MoELayer.forward` raises \"performance may degrade if MoE and tensor parallelism are enabled without also enabling sequence parallelism\" in training); {fix}"
    )]
    MoeTpWithoutSequenceParallel { tp: u32, fix: String },
    #[error(
        "--ep {ep} under --framework torchtitan: torchtitan draws the expert-parallel ranks from the ranks FSDP2 shards over (data_parallel_shard_degree {dp_shard}: {shard_why}) x cp {cp} x tp {tp} = {ranks}, never from the replicas (torchtitan/distributed/parallel_dims.py: ep must divide dp_shard x cp x tp); {fix}"
    )]
    TorchtitanExpertRanks {
        ep: u32,
        dp_shard: u32,
        /// Where that shard degree comes from: "--zero 0 replicates every rank's states".
        shard_why: String,
        cp: u32,
        tp: u32,
        ranks: u64,
        fix: String,
    },
    #[error(
        "--etp {etp} with --moe-dispatcher deepep: Megatron-Core's flex dispatcher then sends each token to every expert-TP rank over the tp x ep group, which tpsim does not model; use --etp 1, or --moe-dispatcher alltoall"
    )]
    DeepepWithExpertTp { etp: u32 },
    #[error(
        "--etp {etp} on {model}, whose experts have biases: Megatron-Core splits biased experts over no expert-TP ranks (TransformerConfig.__post_init__ in megatron/core/transformer/transformer_config.py asserts \"Bias in Moe is only supported when ETP==1\"; --etp defaults to --tp, as in Megatron-Core); use --etp 1"
    )]
    BiasedExpertsWithExpertTp { etp: u32, model: String },
    #[error(
        "--precision {precision}: the {gpu} has no {precision} tensor cores ({why}); use {valid}"
    )]
    PrecisionGpu {
        precision: &'static str,
        gpu: String,
        why: &'static str,
        valid: String,
    },
    #[error("--zero {zero} is not a ZeRO stage; use 0, 1, 2 or 3")]
    ZeroStage { zero: u8 },
    #[error(
        "--dp-replicas {replicas} with --zero 0: without ZeRO every data-parallel rank already holds a whole copy of the parameters, gradients and optimizer states, so there is nothing to keep in fewer copies; give --zero 1, 2 or 3, or drop --dp-replicas"
    )]
    DpReplicasWithoutZero { replicas: u32 },
    #[error(
        "--dp-replicas {replicas} does not divide {what}: each copy of the sharded states is sharded over the same number of them; valid: {valid}"
    )]
    DpReplicasDp {
        replicas: u32,
        what: String,
        valid: String,
    },
    #[error(
        "--dp-replicas {replicas} leaves each copy of the sharded states on one rank ({what} = {ranks}): that is plain data parallelism, --zero 0; give a --dp-replicas that leaves each copy 2 or more ranks, valid: {valid}"
    )]
    DpReplicasSingleRank {
        replicas: u32,
        what: &'static str,
        ranks: u64,
        /// The copies that leave each 2 or more ranks (1: no copies, drop the flag).
        valid: String,
    },
    #[error(
        "--dp-replicas {replicas} does not divide the {expert_dp} expert data-parallel ranks (GPUs of a stage / (ep x etp)) that shard the experts' states: Megatron-Core splits them into the same number of copies (parallel_state.py asserts expert_data_parallel_size % num_distributed_optimizer_instances == 0); valid: {valid}"
    )]
    DpReplicasExpertDp {
        replicas: u32,
        expert_dp: u32,
        valid: String,
    },
    #[error("--dp-replicas {replicas}: {framework} {rule}; give --dp-replicas 1{fix}")]
    DpReplicasFramework {
        replicas: u32,
        framework: &'static str,
        rule: &'static str,
        fix: &'static str,
    },
    #[error(
        "--reshard-after-forward needs --zero 3 (only FSDP/ZeRO-3 gathers parameters to reshard), but the plan has ZeRO-{zero}; use --zero 3 or drop --reshard-after-forward"
    )]
    ReshardWithoutZero3 { zero: u8 },
    #[error(
        "--optimizer-states muon with {what}: tpsim prices Muon's Newton-Schulz step for transformer layers only; use --optimizer-states fp32 (Adam) for this model"
    )]
    MuonNotPriced { what: &'static str },
    #[error(
        "--dp-replicas {replicas} with --optimizer-states muon: Megatron-Core's layer-wise distributed optimizer, which shards Muon's states, owns whole parameters across the whole DP×CP group and refuses several copies of them (layer_wise_optimizer.py: \"does not support num_distributed_optimizer_instances > 1\"); drop --dp-replicas (one copy) or use --optimizer-states fp32 (Adam)"
    )]
    MuonDpReplicas { replicas: u32 },
    #[error(
        "--zero {zero} with --optimizer-states muon on a model whose experts have biases: Megatron-Core's layer-wise distributed optimizer hands the biases (Adam's) to a DistributedOptimizer it cannot build for expert parameters yet (optimizer/__init__.py: \"Non-emerging expert-parallel param groups are not yet supported\"); use --zero 0 (every rank updates every weight) or --optimizer-states fp32 (Adam)"
    )]
    MuonExpertBiases { zero: u8 },
    #[error("--zero {zero} with --optimizer-states {states}: {rule}; {fix}")]
    ZeroForOptimizerStates {
        zero: u8,
        states: &'static str,
        rule: &'static str,
        fix: &'static str,
    },
    #[error(
        "--sequence-parallel needs --tp > 1 (it splits the tensor-parallel region's norms and dropouts over the TP group); use --sequence-parallel false, or --tp 2 or more"
    )]
    SpWithoutTp,
    #[error(
        "--sequence-parallel with --tp {tp} splits each {shard_of}{local}-token sequence{per_rank} into {tp} equal shards, and {local} is not a multiple of {tp} (Megatron-Core splits the sequence dimension evenly over the tensor-parallel ranks); give a --seq-len that is a multiple of {multiple} (e.g. --seq-len {longer}), or --sequence-parallel false"
    )]
    SpSequence {
        tp: u32,
        /// Tokens of a sequence on one CP rank (the whole sequence without CP).
        local: u32,
        /// "" without CP; else the words that say the share is one CP rank's.
        shard_of: &'static str,
        per_rank: String,
        /// What the sequence must be a multiple of, and the next such length.
        multiple: u64,
        longer: u64,
    },
}

impl PlanError {
    /// [`PlanError::CpWithWindow`] for `cp` under `training`, whose fix names the exchanges that
    /// run sliding windows as the framework can take them: Megatron-Core's all_gather and a2a
    /// (`CpExchange::runs_sliding_windows`); torchtitan and 2021 Megatron-LM run neither
    /// (`TrainingFramework::runs_cp_exchange`), so their fix is Megatron-Core with one of them.
    pub fn cp_with_window(cp: u32, training: &crate::training::Training) -> PlanError {
        use crate::training::CpExchange;
        let framework_runs_windows = [CpExchange::KvAllGather, CpExchange::HeadAllToAll]
            .into_iter()
            .any(|e| training.framework.runs_cp_exchange(e));
        PlanError::CpWithWindow {
            cp,
            exchange: training.cp_exchange.as_str(),
            windowed: if framework_runs_windows {
                "--cp-exchange kv-all-gather or head-all-to-all (Megatron-Core's --cp-comm-type all_gather / a2a, which run them)"
            } else {
                "--framework megatron-core with --cp-exchange kv-all-gather or head-all-to-all (Megatron-Core's --cp-comm-type all_gather / a2a run them; this framework's context parallelism does not)"
            },
        }
    }
    /// [`PlanError::UlyssesWithSequenceParallel`] for `cp` beside Megatron's sequence parallelism,
    /// with the `tp` given (if any): a tp above 1 is named with its own rule and fix, since
    /// dropping sequence parallelism alone leaves it refused
    /// ([`PlanError::UlyssesWithModelParallelism`]).
    pub fn ulysses_with_sequence_parallel(cp: u32, tp: Option<u32>) -> Self {
        match tp.filter(|&tp| tp > 1) {
            Some(tp) => PlanError::UlyssesWithSequenceParallel {
                cp,
                with_tp: format!("--tp {tp} and "),
                tp_rule: ", and DeepSpeed-Ulysses runs without tensor parallelism (Megatron-DeepSpeed's initialize_model_parallel asserts tp 1)".to_string(),
                fix: "--tp 1 with ".to_string(),
            },
            None => PlanError::UlyssesWithSequenceParallel {
                cp,
                with_tp: String::new(),
                tp_rule: String::new(),
                fix: String::new(),
            },
        }
    }

    /// The error for a sequence `cp` does not split as `framework` splits it
    /// (`cp_sequence_multiple`); `valid` lists the degrees that do.
    pub fn cp_sequence(
        cp: u32,
        seq_len: u32,
        valid: String,
        framework: crate::training::TrainingFramework,
    ) -> Self {
        let chunks = cp_sequence_multiple(cp, framework);
        if !framework.cp_balances_causal_chunks() {
            return PlanError::UlyssesSequence {
                cp,
                seq_len,
                valid,
                longer: seq_len_multiple_near(seq_len, chunks),
            };
        }
        PlanError::CpSequence {
            cp,
            seq_len,
            valid,
            chunks,
            longer: seq_len_multiple_near(seq_len, chunks),
        }
    }
}
