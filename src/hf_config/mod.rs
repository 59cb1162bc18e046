//! Hugging Face `config.json` → [`Model`]: the first stop of the data flow for users who live on the
//! Hub. Reads the keys `transformers` itself reads for each family (the `*Config` classes in
//! `transformers/models/<family>/configuration_<family>.py`, defaults included) and maps them onto
//! tpsim's shape. What the shape cannot say is documented per family below; each omission is a
//! per-layer vector (well under 0.01% of the parameters).
//!
//! The module splits by job: the families ([`family`]), the error ([`error`]), loading
//! ([`parse`]), the key reader ([`reader`]), non-finite numbers named by key ([`non_finite`]), one file per group of families, and the shape errors
//! told in the config's keys ([`shape_error`]).

mod error;
mod family;
mod llama;
mod moe;
mod nemotron_h;
mod non_finite;
mod parse;
mod positions;
mod reader;
mod shape_error;
mod unique_keys;
mod unknown;

pub use error::HfConfigError;
pub use family::{DEFAULT_TRAINING_SEQ_LEN, Family, SUPPORTED};
pub use parse::{HfModel, load, parse, parse_with_note};
