//! [`Reader`]: one config's keys read as numbers, flags and probabilities, each refusal quoting the
//! value as the file writes it ([`written`]).

use serde_json::{Map, Value};

use super::error::HfConfigError;

/// The number under the key `key` as the config's text writes it (`1e30`, `1E3`), so a message
/// quotes what the user wrote rather than serde's rendering of it (`1e+30`, `1000.0`); anything
/// else, or a number not found as written, is rendered by serde.
pub(super) fn written(text: &str, key: &str, v: &Value) -> String {
    if v.is_number() {
        let quoted = format!("\"{key}\"");
        let mut rest = text;
        while let Some(at) = rest.find(&quoted) {
            rest = &rest[at + quoted.len()..];
            let Some(value) = rest.trim_start().strip_prefix(':') else {
                continue;
            };
            let value = value.trim_start();
            let end = value
                .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
                .unwrap_or(value.len());
            let token = &value[..end];
            if serde_json::from_str::<Value>(token).ok().as_ref() == Some(v) {
                return token.to_string();
            }
        }
    }
    v.to_string()
}

pub(super) struct Reader<'a> {
    pub(super) obj: &'a Map<String, Value>,
    /// The config as written, for quoting its numbers ([`written`]).
    pub(super) text: &'a str,
    pub(super) path: &'a str,
    pub(super) family: &'static str,
}

impl Reader<'_> {
    pub(super) fn bad(&self, key: &'static str, v: &Value, rule: &'static str) -> HfConfigError {
        HfConfigError::BadValue {
            path: self.path.to_string(),
            key,
            found: written(self.text, key, v),
            rule,
        }
    }

    pub(super) fn optional(&self, key: &'static str) -> Result<Option<u32>, HfConfigError> {
        match self.obj.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => match v.as_u64().map(u32::try_from) {
                Some(Ok(n)) if n > 0 => Ok(Some(n)),
                Some(Err(_)) => Err(self.too_large(key, v)),
                _ => Err(self.bad(key, v, "a positive integer")),
            },
        }
    }

    /// A count past what tpsim reads (u32), named as too large rather than as not a count.
    fn too_large(&self, key: &'static str, v: &Value) -> HfConfigError {
        self.unsupported(format!(
            "key \"{key}\" is {}, which is too large: tpsim reads counts up to {} (and no model trained comes near that); check the config",
            written(self.text, key, v),
            u32::MAX
        ))
    }

    /// A key whose `*Config` class default applies when the key is absent. `null` is refused: the
    /// class has no rule for None there (it would build no model, or fail its type check), and
    /// reading it as the default would be a guess.
    pub(super) fn class_default(
        &self,
        key: &'static str,
        default: u32,
    ) -> Result<u32, HfConfigError> {
        match self.obj.get(key) {
            None => Ok(default),
            Some(Value::Null) => Err(self.null_refused(key, default)),
            Some(_) => Ok(self.optional(key)?.unwrap_or(default)),
        }
    }

    fn null_refused(&self, key: &'static str, default: u32) -> HfConfigError {
        self.unsupported(format!(
            "key \"{key}\" is null, which transformers' config class reads as no value here (its default is {default}); write the number, or remove the key for the default"
        ))
    }

    /// The key-value heads as the `*Config` classes set them: the class default when the key is
    /// absent, and for `null` the attention heads where the class has that rule
    /// ([`null_kv_heads_mean_heads`]); elsewhere `null` is refused.
    pub(super) fn kv_heads(
        &self,
        class_default: Option<u32>,
        heads: u32,
        null_means_heads: bool,
    ) -> Result<u32, HfConfigError> {
        const KEY: &str = "num_key_value_heads";
        match self.obj.get(KEY) {
            None => Ok(class_default.unwrap_or(heads)),
            Some(Value::Null) if null_means_heads => Ok(heads),
            Some(Value::Null) => Err(self.null_refused(KEY, class_default.unwrap_or(heads))),
            Some(_) => Ok(self.optional(KEY)?.unwrap_or(heads)),
        }
    }

    /// The head width: the class default when the key is absent, hidden / heads for `null` where
    /// the class computes it so (`null_computes`: `head_dim if head_dim is not None else
    /// hidden_size // num_attention_heads` in LlamaConfig, MistralConfig, MixtralConfig, whose
    /// default is None, and GptOssConfig, whose default is 64), and refused where the class keeps
    /// a None it has no rule for (Qwen3Config 128, GemmaConfig 256).
    pub(super) fn head_dim(
        &self,
        class_default: Option<u32>,
        null_computes: bool,
        hidden: u32,
        heads: u32,
    ) -> Result<u32, HfConfigError> {
        const KEY: &str = "head_dim";
        let computed = hidden / heads.max(1);
        match (self.obj.get(KEY), class_default) {
            (None, default) => Ok(default.unwrap_or(computed)),
            (Some(Value::Null), None) => Ok(computed),
            (Some(Value::Null), Some(_)) if null_computes => Ok(computed),
            (Some(Value::Null), Some(default)) => Err(self.null_refused(KEY, default)),
            (Some(_), _) => Ok(self.optional(KEY)?.unwrap_or(computed)),
        }
    }

    pub(super) fn required(
        &self,
        key: &'static str,
        example: &'static str,
    ) -> Result<u32, HfConfigError> {
        self.optional(key)?
            .ok_or_else(|| self.missing(key, example))
    }

    pub(super) fn required_any(
        &self,
        keys: &[&'static str],
        example: &'static str,
    ) -> Result<u32, HfConfigError> {
        for key in keys {
            if let Some(n) = self.optional(key)? {
                return Ok(n);
            }
        }
        Err(self.missing(keys[0], example))
    }

    /// A JSON boolean; anything else under the key (`"yes"`, 1) is an error naming it.
    pub(super) fn flag(&self, key: &'static str) -> Result<Option<bool>, HfConfigError> {
        match self.obj.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(self.bad(key, v, "a JSON boolean (true or false)")),
        }
    }

    /// GPT-OSS's clamp limit, `swiglu_limit` (`GptOssConfig` default 7.0 when the key is absent).
    /// transformers' `GptOssExperts` clamps without a condition (`gate.clamp(min=None,
    /// max=self.limit)`, `up.clamp(min=-self.limit, max=self.limit)`; releases that hard-code
    /// `self.limit = 7.0` ignore the key), so `null` is no "no clamp": torch refuses a clamp with
    /// neither bound, and it is refused here with the value to write.
    pub(super) fn swiglu_limit(&self) -> Result<crate::model::GluClampLimit, HfConfigError> {
        const KEY: &str = "swiglu_limit";
        match self.obj.get(KEY) {
            None => Ok(crate::model::GluClampLimit::GPT_OSS),
            Some(Value::Null) => Err(self.unsupported(format!(
                "key \"{KEY}\" is null, and transformers' GptOssExperts clamps every expert's gate and linear half at this limit without a condition (torch's clamp refuses a null bound), so null gives no model to read; write the limit, \"{KEY}\": 7.0 as gpt-oss-20b and gpt-oss-120b ship it, or remove the key for that default"
            ))),
            Some(v) => v
                .as_f64()
                .and_then(crate::model::GluClampLimit::new)
                .ok_or_else(|| {
                    self.bad(
                        KEY,
                        v,
                        "a positive, finite number (the gate is clamped from above and the linear half to [-limit, limit]; gpt-oss ships 7.0)",
                    )
                }),
        }
    }

    /// A dropout probability in [0, 1].
    fn probability(&self, key: &'static str) -> Result<Option<f64>, HfConfigError> {
        match self.obj.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => match v.as_f64() {
                Some(p) if (0.0..=1.0).contains(&p) => Ok(Some(p)),
                _ => Err(self.bad(key, v, "a probability between 0 and 1")),
            },
        }
    }

    /// Dropout as tpsim models it: one switch for the dropout after attention and MLP and the
    /// attention dropout together (Megatron's `--hidden-dropout` and `--attention-dropout`;
    /// `Model::dropout`, which keeps the masks and runs the kernels), from the config's
    /// probabilities `keys`, each with its `*Config` class default when absent (or null). On when
    /// every one is positive, off when every one is 0; a mix is refused, since either reading
    /// prices, and an emitted configuration trains, another model than the config's. A family
    /// whose blocks have no hidden dropout (the Llama-style `*Config` classes read only
    /// `attention_dropout`, default 0.0, in their attention) passes `no_hidden_dropout`: there
    /// any positive value is such a mix.
    pub(super) fn dropout(
        &self,
        keys: &[(&'static str, f64)],
        no_hidden_dropout: bool,
    ) -> Result<bool, HfConfigError> {
        let mut read = Vec::with_capacity(keys.len());
        for &(key, default) in keys {
            read.push((key, self.probability(key)?.unwrap_or(default)));
        }
        let on = read.iter().filter(|(_, p)| *p > 0.0).count();
        if on == 0 {
            return Ok(false);
        }
        if on == read.len() && !no_hidden_dropout {
            return Ok(true);
        }
        let said: Vec<String> = read
            .iter()
            .map(
                |(key, p)| match self.obj.get(*key).filter(|v| !v.is_null()) {
                    Some(v) => format!("\"{key}\" {}", written(self.text, key, v)),
                    None => format!("\"{key}\" {p} (the class default)"),
                },
            )
            .collect();
        let rule = if no_hidden_dropout {
            format!(
                "the {} blocks have no other dropout (none after attention and MLP), and tpsim models dropout as one switch for the hidden and attention dropouts together (Megatron's --hidden-dropout and --attention-dropout)",
                self.family
            )
        } else {
            "tpsim models dropout as one switch for all of them (Megatron's --hidden-dropout and --attention-dropout together)".to_string()
        };
        let said = match said.split_last() {
            Some((last, rest)) if !rest.is_empty() => {
                format!("{} and {last} differ", rest.join(", "))
            }
            _ => said.join(""),
        };
        Err(self.unsupported(format!(
            "{said}: {rule}, so it would price, and an emitted configuration would train, other dropout than the config's; set {} to 0.0{}",
            if read.len() == 1 { "it" } else { "them all" },
            if no_hidden_dropout {
                ""
            } else {
                " or all above 0"
            }
        )))
    }

    /// A non-negative integer with a default (`decoder_sparse_step`, `first_k_dense_replace`).
    pub(super) fn count_or(&self, key: &'static str, default: u32) -> Result<u32, HfConfigError> {
        match self.obj.get(key) {
            None => Ok(default),
            Some(Value::Null) => Err(self.null_refused(key, default)),
            Some(v) => v
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| self.bad(key, v, "a non-negative integer")),
        }
    }

    /// The shared experts' width, `count` of `width` each (DeepSeek's and GLM's `n_shared_experts`
    /// x `moe_intermediate_size`, Nemotron-H's x `moe_shared_expert_intermediate_size`). A product
    /// past the widest MLP the model check takes is told in both keys as written: the check named
    /// one key with the product (a number the config does not hold), wrapped past 2^32 in u32.
    pub(super) fn shared_width(
        &self,
        count_key: &'static str,
        count: u32,
        width_key: &'static str,
        width: u32,
    ) -> Result<u32, HfConfigError> {
        let max = crate::model::MAX_FFN_WIDTH;
        count
            .checked_mul(width)
            .filter(|w| *w <= max)
            .ok_or_else(|| {
                self.unsupported(format!(
                    "keys \"{count_key}\" {count} x \"{width_key}\" {width} make the shared experts {} wide together, larger than {max}, beyond any model trained; check the config",
                    u64::from(count) * u64::from(width)
                ))
            })
    }

    pub(super) fn unsupported(&self, message: String) -> HfConfigError {
        HfConfigError::Unsupported {
            path: self.path.to_string(),
            message,
        }
    }

    pub(super) fn missing(&self, key: &'static str, example: &'static str) -> HfConfigError {
        // A multimodal config (LLaVA, Gemma 3, Mistral 3) nests its language model under
        // "text_config"; the text families' *Config classes read only top-level keys, as tpsim
        // does, so "add the key" would copy one number of many by hand.
        if let Some(nested) = self
            .obj
            .get("text_config")
            .and_then(Value::as_object)
            .and_then(|t| t.get(key))
        {
            return self.unsupported(format!(
                "key \"{key}\" is missing at the top level, but \"text_config\" gives \"{key}\": {} (a multimodal config's language model); tpsim reads the top-level keys, as transformers' {} config class does: save the \"text_config\" object as a config.json of its own (with its \"model_type\") and pass that",
                written(self.text, key, nested),
                self.family
            ));
        }
        HfConfigError::MissingKey {
            path: self.path.to_string(),
            key,
            family: self.family,
            example,
        }
    }
}
