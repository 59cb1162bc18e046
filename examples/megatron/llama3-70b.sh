#!/bin/bash
# Llama-3-70B pre-training on 16 nodes of 8 H100s with Megatron-LM: a launch script in the shape of
# Megatron-LM's examples/gpt3/train_gpt3_175b_distributed.sh, with the numbers written out.
# `tpsim eval --nodes 16 --megatron-args @examples/megatron/llama3-70b.sh` reads it.

DISTRIBUTED_ARGS=(
    --nproc_per_node 8
    --nnodes 16
)

MODEL_ARGS=(
    --num-layers 80
    --hidden-size 8192
    --ffn-hidden-size 28672
    --num-attention-heads 64
    --group-query-attention
    --num-query-groups 8
    --swiglu
    --normalization RMSNorm
    --disable-bias-linear
    --untie-embeddings-and-output-weights
    --position-embedding-type rope
    --rotary-base 500000
    --vocab-size 128256
    --seq-length 8192
    --max-position-embeddings 8192
    --attention-dropout 0.0
    --hidden-dropout 0.0
)

TRAINING_ARGS=(
    --micro-batch-size 1
    --global-batch-size 512
    --train-iters 500000
    --lr 1.5e-4
    --min-lr 1.5e-5
    --lr-decay-style cosine
    --weight-decay 0.1
    --clip-grad 1.0
    --bf16
    --use-flash-attn
)

PARALLEL_ARGS=(
    --tensor-model-parallel-size 8
    --pipeline-model-parallel-size 4
    --num-layers-per-virtual-pipeline-stage 5
    --sequence-parallel
    --use-distributed-optimizer
    --recompute-granularity selective
)

torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py \
    ${MODEL_ARGS[@]} \
    ${TRAINING_ARGS[@]} \
    ${PARALLEL_ARGS[@]} \
    --data-path /data/llama3/text_document \
    --tokenizer-type HuggingFaceTokenizer \
    --tokenizer-model meta-llama/Meta-Llama-3-70B
