//! [`HfConfigError`]: why a `config.json` is not a model, naming the file, the key, the rule and a fix.

#[derive(Debug, thiserror::Error)]
pub enum HfConfigError {
    #[error("--hf-config {path}: cannot read it: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("--hf-config {path}: not valid JSON ({message}); pass the model's config.json")]
    Json { path: String, message: String },
    #[error(
        "--hf-config {path}: model_type {found:?} is not one tpsim reads, so what its layers add beyond the block tpsim prices (their attention, norms, routing) is unknown to it; supported model_type values: {supported} (or drop --hf-config and describe the shape with {fix})"
    )]
    UnreadModelType {
        path: String,
        found: String,
        supported: String,
        /// The shape flags with the config's own values ([`super::unknown::shape_flags`]).
        fix: String,
    },
    #[error(
        "--hf-config {path}: the config has no \"model_type\" (nor \"architectures\") key, so its architecture is unknown; add \"model_type\": one of {supported} (or describe the shape with --layers/--hidden/--heads)"
    )]
    NoModelType { path: String, supported: String },
    #[error(
        "--hf-config {path}: key \"{key}\" is missing; a {family} config.json has it (e.g. \"{key}\": {example})"
    )]
    MissingKey {
        path: String,
        key: &'static str,
        family: &'static str,
        example: &'static str,
    },
    #[error(
        "--hf-config {path}: key \"{key}\" is {found}, which is not {rule}; correct it in the config"
    )]
    BadValue {
        path: String,
        key: &'static str,
        found: String,
        rule: &'static str,
    },
    #[error("--hf-config {path}: {message}")]
    Unsupported { path: String, message: String },
}
