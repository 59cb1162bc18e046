//! tpsim: plans parallel training (tensor, context, pipeline, data, expert) of transformers on GPU clusters.
//!
//! Data flows one way: spec files (`specs`) → domain types (`model`, `cluster`, `plan`, `training`)
//! → pure cost model (`cost`) → planner (`planner`) → renderers (`report`). The command-line edge
//! (`cli`, `app`) is the only place that knows about flags, files and exit codes.

pub mod app;
pub mod calibrate;
pub mod cli;
pub mod cli_errors;
pub mod cluster;
pub mod compare;
pub mod cost;
pub mod emit;
pub mod hf_config;
pub mod input_file;
pub mod integer;
pub mod memory_margin;
pub mod model;
pub mod model_file_words;
pub mod modern_runs;
pub mod output_file;
pub mod plan;
pub mod planner;
pub mod report;
pub mod shape;
pub mod specs;
pub mod sweep;
pub mod training;
pub mod uncertainty;
pub mod units;
pub mod validation;
pub mod yaml_keys;
pub mod yaml_numbers;
