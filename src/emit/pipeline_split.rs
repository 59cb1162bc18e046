//! How a tpsim pipeline split is said in Megatron-LM arguments, and how Megatron's split
//! arguments place layers on stages (Megatron-Core `transformer_config.py` `__post_init__`, the
//! "Uneven PP" and `account_for_*_in_pipeline_split` checks; Megatron-LM `arguments.py`
//! `validate_args` for the virtual stages).

use crate::model::Model;
use crate::plan::ParallelPlan;

/// The Megatron-LM arguments that reproduce a plan's stage layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MegatronSplit {
    /// layers / pp on every stage: no argument needed.
    Even,
    /// tpsim's uneven split (embedding and loss counted as a layer each, `layers + 2` units split
    /// evenly): `--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split`.
    EmbeddingAndLossCounted,
    /// `--decoder-first-pipeline-num-layers F --decoder-last-pipeline-num-layers L`, the middle
    /// stages sharing the rest equally.
    FirstLast { first: u32, last: u32 },
    /// Interleaved chunks filled front to back, the last one with the remainder
    /// (`StageLayout::filled_chunks`, or `plan::unit_chunks` with units): Megatron-Core's `--pipeline-model-parallel-layout`, one
    /// `|`-separated entry per model chunk in depth order, `E` the embedding, `t*N` N transformer
    /// layers, `L` the loss (megatron/core/transformer/pipeline_parallel_layer_layout.py), as
    /// Megatron-Bridge writes DeepSeek-V3's.
    Layout { layout: String },
    /// Middle stages with different layer counts: Megatron's first/last arguments cannot say it, and a
    /// per-stage layout would not be one of the forms tpsim reads back (`ChunkLayout`).
    Inexpressible { why: String },
    /// A hybrid stack's pipeline: its layer pattern cut by '|' into one segment per model chunk in
    /// depth order (segment `vp·pp + rank` on pipeline rank `rank`), each the layers tpsim prices on
    /// that chunk (`cost::pipeline::ChunkLayout::range`). Megatron-Core takes the stages and the
    /// virtual stages from these separators and refuses every other split argument beside them
    /// (Megatron-LM `arguments.py` at d98e8a64ddf3: "Pipeline stage layout is defined by |
    /// separators in the pattern"; `select_pipeline_segment` in
    /// megatron/core/models/hybrid/hybrid_layer_allocation.py, '|' since core_v0.17.0).
    PatternSegments { pattern: String },
}

impl MegatronSplit {
    pub fn of(model: &Model, plan: &ParallelPlan) -> MegatronSplit {
        if let Some(hybrid) = &model.hybrid
            && plan.pp > 1
        {
            return MegatronSplit::PatternSegments {
                pattern: segmented_pattern(&hybrid.pattern, model, plan),
            };
        }
        let s = &plan.stages;
        if s.balanced_chunks(model.layers, plan.pp, plan.vpp) {
            // Chunks of unequal size in even stages: only a layout says them.
            let layout = crate::cost::pipeline::ChunkLayout::of(model, plan);
            let chunks = plan.pp * plan.vpp;
            let entries: Vec<String> = (0..chunks)
                .map(|chunk| {
                    let (start, end) = layout.range(chunk);
                    let body = decoder_entry(end - start);
                    match (chunk == 0, chunk + 1 == chunks) {
                        (true, _) => format!("E{body}"),
                        (_, true) => {
                            format!("{body}{}L", "m".repeat(model.mtp_layers as usize))
                        }
                        _ => body,
                    }
                })
                .collect();
            return MegatronSplit::Layout {
                layout: entries.join("|"),
            };
        }
        if s.even {
            return MegatronSplit::Even;
        }
        if s.given {
            return MegatronSplit::FirstLast {
                first: s.first,
                last: s.last,
            };
        }
        if s.chunk_layers > 0 {
            let chunks = plan.pp * plan.vpp;
            let last = model.layers - s.chunk_layers * (chunks - 1);
            let mut entries = vec![format!("Et*{}", s.chunk_layers)];
            entries.extend((1..chunks - 1).map(|_| format!("t*{}", s.chunk_layers)));
            // MTP layers sit in the last chunk before the loss; Megatron-Core checks that the
            // layout has as many `m` as `--mtp-num-layers` (`validate_layer_layout`).
            let mtp = "m".repeat(model.mtp_layers as usize);
            entries.push(format!("t*{last}{mtp}L"));
            return MegatronSplit::Layout {
                layout: entries.join("|"),
            };
        }
        if plan.vpp > 1
            && let Some(units) = crate::plan::unit_chunks(model, plan.pp, plan.vpp)
            && (model.mtp_layers > 0 || units.last_chunk_units != units.per_chunk)
        {
            // Units counted with MTP, or a last chunk lighter than the others: Megatron-Core's
            // `--account-for-*` switches say neither, so say it as a layout, as Megatron-Bridge
            // does ('Et|(tt|)*30mL', 'Et|(tt|)*30L'), with the MTP layers as units of the last
            // chunk or on top of it.
            let chunks = plan.pp * plan.vpp;
            let per_chunk = units.per_chunk;
            let last = units.last_chunk_layers(model.mtp_layers);
            let mut entries = vec![format!("E{}", decoder_entry(per_chunk - 1))];
            entries.extend((1..chunks - 1).map(|_| decoder_entry(per_chunk)));
            entries.push(format!(
                "{}{}L",
                decoder_entry(last),
                "m".repeat(model.mtp_layers as usize)
            ));
            return MegatronSplit::Layout {
                layout: entries.join("|"),
            };
        }
        // Megatron counts the embedding and the loss, not MTP layers, as pipeline units.
        let units = model.layers + 2;
        if units.is_multiple_of(plan.pp) && model.mtp_layers == 0 {
            return MegatronSplit::EmbeddingAndLossCounted;
        }
        let middles = plan.pp.saturating_sub(2);
        let middle_layers = model.layers.saturating_sub(s.first + s.last);
        let middles_equal = middles == 0 || middle_layers == s.middle_max * middles;
        if s.first > 0 && s.last > 0 && middles_equal {
            MegatronSplit::FirstLast {
                first: s.first,
                last: s.last,
            }
        } else {
            MegatronSplit::Inexpressible {
                why: format!(
                    "its uneven split of {} layers on {} stages (first {}, middle up to {}, last {}) gives the middle stages different layer counts, which --decoder-first/last-pipeline-num-layers cannot express, and tpsim writes --pipeline-model-parallel-layout only in the filled-chunk forms it reads back and models; use a --pp that divides {} or {} (layers + 2)",
                    model.layers, plan.pp, s.first, s.middle_max, s.last, model.layers, units
                ),
            }
        }
    }

    /// Megatron's `--num-layers-per-virtual-pipeline-stage` for an interleaved plan: the layers
    /// (plus the embedding and the loss when they are counted) over pp x vpp model chunks.
    pub fn layers_per_virtual_stage(model: &Model, plan: &ParallelPlan) -> u32 {
        let counted = match MegatronSplit::of(model, plan) {
            MegatronSplit::EmbeddingAndLossCounted => model.layers + 2,
            _ => model.layers,
        };
        counted / (plan.pp * plan.vpp)
    }
}

/// A hybrid `pattern` cut into `plan`'s model chunks by '|', in depth order.
fn segmented_pattern(pattern: &str, model: &Model, plan: &ParallelPlan) -> String {
    let layout = crate::cost::pipeline::ChunkLayout::of(model, plan);
    let symbols: Vec<char> = pattern.chars().collect();
    (0..plan.pp * plan.vpp.max(1))
        .map(|chunk| {
            let (start, end) = layout.range(chunk);
            symbols[start as usize..end as usize]
                .iter()
                .collect::<String>()
        })
        .collect::<Vec<_>>()
        .join("|")
}

/// `n` transformer layers in a layout entry: nothing, `t`, or `t*n`.
fn decoder_entry(n: u32) -> String {
    match n {
        0 => String::new(),
        1 => "t".into(),
        n => format!("t*{n}"),
    }
}

/// Megatron's split arguments as given on a launch line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SplitArgs {
    pub embedding_counted: bool,
    pub loss_counted: bool,
    pub first: Option<u32>,
    pub last: Option<u32>,
    /// `--pipeline-model-parallel-layout` in the filled-chunk form tpsim models.
    pub layout: Option<ChunkLayout>,
}

/// A `--pipeline-model-parallel-layout` in the forms tpsim models: every chunk but the first and
/// the last holds `per_chunk` layers; the first (with the embedding) as many or one fewer, the last
/// (with any MTP layers and the loss) at most as many. Chunks filled front to back
/// (`StageLayout::filled_chunks`, 'Et*4|t*4|t*1mL') and every unit counted
/// (`plan::unit_chunks`, 'Et|(tt|)*30mL') are both of this form. Or balanced chunks
/// (`StageLayout::balanced_chunks`, 'Et*7|t*7|t*7|t*7|t*6|t*6|t*6|t*6L'): the first
/// `heavier_leading` chunks hold `per_chunk + 1` layers, the rest `per_chunk`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkLayout {
    pub chunks: u32,
    pub first_chunk: u32,
    pub per_chunk: u32,
    pub last_chunk: u32,
    /// MTP layers (`m`) just before the loss in the last chunk.
    pub mtp_layers: u32,
    /// Leading chunks holding one layer more than `per_chunk` (balanced chunks); 0 in the
    /// other forms.
    pub heavier_leading: u32,
}

/// The longest layout tpsim unrolls (Megatron's layouts are a few hundred characters).
const LAYOUT_UNROLLED_MAX_CHARS: usize = 100_000;

/// Megatron-Core's unrolling of a layout string (`parse_str_to_list`): commas dropped, then every
/// `(X)*N` (X without parentheses) and then every `x*N` replaced by N copies. Err names what is
/// wrong.
fn unroll_layout(text: &str) -> Result<String, String> {
    fn repeat_count(rest: &str) -> Result<(usize, usize), String> {
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        if digits.is_empty() {
            return Err("* must be followed by a count".into());
        }
        let count = digits
            .parse::<usize>()
            .ok()
            .filter(|&n| n <= LAYOUT_UNROLLED_MAX_CHARS)
            .ok_or("a repeat count is too large")?;
        Ok((count, digits.len()))
    }
    fn push_repeated(out: &mut String, unit: &str, count: usize) -> Result<(), String> {
        if out.len() + unit.len().saturating_mul(count) > LAYOUT_UNROLLED_MAX_CHARS {
            return Err("it unrolls to more layers than tpsim counts".into());
        }
        out.push_str(&unit.repeat(count));
        Ok(())
    }
    let text: String = text.chars().filter(|&c| c != ',').collect();
    let mut groups = String::new();
    let mut rest = text.as_str();
    while let Some(open) = rest.find('(') {
        groups.push_str(&rest[..open]);
        let inner_and_after = &rest[open + 1..];
        let close = inner_and_after
            .find(')')
            .ok_or("a parenthesis is not closed")?;
        let inner = &inner_and_after[..close];
        if inner.is_empty() || inner.contains('(') {
            return Err("parentheses must hold a non-empty group and do not nest".into());
        }
        let after = inner_and_after[close + 1..]
            .strip_prefix('*')
            .ok_or("a group in parentheses must be followed by *N")?;
        let (count, digits) = repeat_count(after)?;
        push_repeated(&mut groups, inner, count)?;
        rest = &after[digits..];
    }
    groups.push_str(rest);
    if groups.contains(')') {
        return Err("a parenthesis is not opened".into());
    }
    let mut out = String::new();
    let mut chars = groups.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if let Some(after) = groups[i + c.len_utf8()..].strip_prefix('*') {
            if c == '*' || c == '|' {
                return Err("* must follow a layer (t, m)".into());
            }
            let (count, digits) = repeat_count(after)?;
            push_repeated(&mut out, &c.to_string(), count)?;
            // Skip the '*' and the digits.
            for _ in 0..=digits {
                chars.next();
            }
        } else if c == '*' {
            return Err("* must follow a layer (t, m)".into());
        } else {
            push_repeated(&mut out, &c.to_string(), 1)?;
        }
    }
    Ok(out)
}

impl ChunkLayout {
    /// Reads Megatron-Core's layout string (megatron/core/transformer/
    /// pipeline_parallel_layer_layout.py `parse_str_to_list`: `|` between model chunks in depth
    /// order, `E` the embedding, `t` a transformer layer, `m` an MTP layer, `L` the loss, `x*N` N
    /// of x, `(...)*N` N copies of a group, commas ignored) in the form tpsim models
    /// ([`ChunkLayout`]): `E` opening the first chunk, `L` closing the last, MTP layers right
    /// before it.
    pub fn parse(text: &str) -> Result<ChunkLayout, String> {
        let text = text.trim().trim_matches(|c| c == '\'' || c == '"');
        let refuse = |why: &str| {
            Err(format!(
                "--pipeline-model-parallel-layout {text}: {why}; tpsim models layouts whose chunks hold the same number of layers but the first (E and as many or one fewer) and the last (fewer, then any m and L), like 'Et*4|t*4|t*1mL' or 'Et|(tt|)*30mL', or whose leading chunks hold one layer more than the rest, like 'Et*7|t*7|t*6|t*6L'"
            ))
        };
        let unrolled = match unroll_layout(text) {
            Ok(unrolled) => unrolled,
            Err(why) => return refuse(&why),
        };
        let entries: Vec<&str> = unrolled.split('|').collect();
        let mut counts = Vec::with_capacity(entries.len());
        let mut mtp_layers = 0u32;
        for (i, entry) in entries.iter().enumerate() {
            let mut body = *entry;
            if let Some(rest) = body.strip_prefix('E') {
                if i != 0 {
                    return refuse("the embedding E must open the first chunk");
                }
                body = rest;
            } else if i == 0 {
                return refuse("the first chunk must start with the embedding E");
            }
            if let Some(rest) = body.strip_suffix('L') {
                if i + 1 != entries.len() {
                    return refuse("the loss L must close the last chunk");
                }
                body = rest.trim_end_matches('m');
                mtp_layers = u32::try_from(rest.len() - body.len()).unwrap_or(u32::MAX);
            } else if i + 1 == entries.len() {
                return refuse("the last chunk must end with the loss L");
            }
            if body.contains('m') {
                return refuse("MTP layers (m) go right before the loss L in the last chunk");
            }
            if let Some(other) = body.chars().find(|&c| c != 't') {
                return refuse(&format!(
                    "'{other}' is not understood (E, t, m, L, x*N and (...)*N are)"
                ));
            }
            counts.push(u32::try_from(body.len()).unwrap_or(u32::MAX));
        }
        let chunks = u32::try_from(counts.len()).unwrap_or(u32::MAX);
        let first_chunk = counts[0];
        let last_chunk = counts[counts.len() - 1];
        let middle = &counts[1..counts.len().saturating_sub(1).max(1)];
        let per_chunk = middle.first().copied().unwrap_or(first_chunk);
        if per_chunk == 0 {
            return refuse("a chunk holds no transformer layer");
        }
        let first_fits = first_chunk == per_chunk || (chunks > 2 && first_chunk + 1 == per_chunk);
        if middle.iter().any(|&c| c != per_chunk) || !first_fits || last_chunk > per_chunk {
            return match ChunkLayout::balanced(&counts, mtp_layers) {
                Some(balanced) => Ok(balanced),
                None => refuse("its chunks hold different numbers of layers"),
            };
        }
        Ok(ChunkLayout {
            chunks,
            first_chunk,
            per_chunk,
            last_chunk,
            mtp_layers,
            heavier_leading: 0,
        })
    }

    /// Chunk layer counts in depth order of the balanced form (some leading chunks one layer
    /// heavier than all the others, each holding a layer), or None.
    pub fn balanced(counts: &[u32], mtp_layers: u32) -> Option<ChunkLayout> {
        let heavy = *counts.first()?;
        let light = heavy.checked_sub(1).filter(|&n| n > 0)?;
        let heavier_leading = counts.iter().take_while(|&&c| c == heavy).count();
        let rest = &counts[heavier_leading..];
        if rest.is_empty() || rest.iter().any(|&c| c != light) {
            return None;
        }
        Some(ChunkLayout {
            chunks: u32::try_from(counts.len()).ok()?,
            first_chunk: heavy,
            per_chunk: light,
            last_chunk: light,
            mtp_layers,
            heavier_leading: u32::try_from(heavier_leading).ok()?,
        })
    }

    /// Transformer layers the layout places.
    pub fn layers(&self) -> u32 {
        if self.heavier_leading > 0 {
            return self.per_chunk * self.chunks + self.heavier_leading;
        }
        match self.chunks {
            1 => self.first_chunk,
            n => self.first_chunk + self.per_chunk * (n - 2) + self.last_chunk,
        }
    }
}

/// Transformer layers per stage as Megatron places them: first, each middle, last.
/// Whether first/last stage counts split `layers` on `pp` stages as Megatron-Core takes them:
/// the stages without a count share what is left evenly, at least one layer each.
fn first_last_fit(layers: u32, pp: u32, first: Option<u32>, last: Option<u32>) -> bool {
    let named = u32::from(first.is_some()) + u32::from(last.is_some());
    let taken = u64::from(first.unwrap_or(0)) + u64::from(last.unwrap_or(0));
    let Some(stages) = pp.checked_sub(named) else {
        return false;
    };
    let Some(rest) = u64::from(layers).checked_sub(taken) else {
        return false;
    };
    match stages {
        0 => rest == 0,
        _ => rest >= u64::from(stages) && rest.is_multiple_of(u64::from(stages)),
    }
}

/// The fix for a first or last stage count too large for `layers` on `pp` stages, `other` the
/// other end's count: the largest that leaves each other stage a layer, and one near an even
/// share that splits.
fn first_last_fix(flag: &str, layers: u32, pp: u32, other: Option<u32>) -> String {
    let others = pp.saturating_sub(1 + u32::from(other.is_some()));
    let most = layers
        .saturating_sub(other.unwrap_or(0))
        .saturating_sub(others);
    let fits = |v: u32| {
        if flag.contains("first") {
            first_last_fit(layers, pp, Some(v), other)
        } else {
            first_last_fit(layers, pp, other, Some(v))
        }
    };
    // The fitting count nearest an even share of the layers.
    let even = u64::from(layers.div_ceil(pp.max(1)));
    match (1..=most)
        .filter(|v| fits(*v))
        .min_by_key(|v| u64::from(*v).abs_diff(even))
    {
        Some(example) => format!(
            "give at most {most} (each of the other {others} stage(s) holds a layer, and the middle ones split the rest evenly), e.g. --{flag} {example}"
        ),
        None => format!(
            "give a smaller count that leaves each of the other {others} stage(s) a layer (the model has {layers}), or a smaller --pipeline-model-parallel-size"
        ),
    }
}

/// Megatron-LM's pipeline split arguments on a plan without a pipeline: tpsim's refusal, one
/// wording for `check_split` and for the first/last counts read before the plan is built.
pub const SPLIT_NEEDS_PIPELINE: &str = "pipeline split arguments (--decoder-first/last-pipeline-num-layers, --account-for-*-in-pipeline-split, --pipeline-model-parallel-layout) need --pipeline-model-parallel-size 2 or more; drop them";

/// The fix for first/last stage counts that leave the other stages a remainder that does not
/// split evenly: the count nearest an even share that does, for the flag given (the first's
/// when both are), the other kept; else a smaller pipeline.
fn first_last_split_fix(layers: u32, pp: u32, first: Option<u32>, last: Option<u32>) -> String {
    let (flag, other) = match first {
        Some(_) => ("decoder-first-pipeline-num-layers", last),
        None => ("decoder-last-pipeline-num-layers", first),
    };
    let fits = |v: u32| {
        if first.is_some() {
            first_last_fit(layers, pp, Some(v), other)
        } else {
            first_last_fit(layers, pp, other, Some(v))
        }
    };
    let even = u64::from(layers.div_ceil(pp.max(1)));
    match (1..=layers)
        .filter(|v| fits(*v))
        .min_by_key(|v| u64::from(*v).abs_diff(even))
    {
        Some(example) => format!("e.g. --{flag} {example}"),
        None => format!(
            "change the counts so the other stages split the rest evenly, or drop --{flag} for an even split of the {layers} layers"
        ),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StageLayers {
    pub first: u32,
    pub middle: u32,
    pub last: u32,
}

impl SplitArgs {
    pub fn any(&self) -> bool {
        self.embedding_counted
            || self.loss_counted
            || self.first.is_some()
            || self.last.is_some()
            || self.layout.is_some()
    }

    /// The layers Megatron counts when it splits: the transformer layers, plus one for the
    /// embedding and one for the loss when the `--account-for-*` switches are on.
    pub fn counted_layers(&self, layers: u32) -> u32 {
        layers + u32::from(self.embedding_counted) + u32::from(self.loss_counted)
    }

    /// The first/last split tpsim evaluates as given: first/last layer counts, or a layout with one
    /// chunk per stage (Megatron-Bridge's DeepSeek-V3 'Et*4|t*4|...|t*1mL'), on two or more stages
    /// without interleaving. None for the other kinds, which must match tpsim's own split, and for
    /// arguments Megatron refuses (`stage_layers` says why).
    pub fn given_first_last(&self, layers: u32, pp: u32, vpp: u32) -> Option<(u32, u32)> {
        let named = self.first.is_some() || self.last.is_some();
        let layout_per_stage = self.layout.is_some_and(|l| l.chunks == pp);
        if !(named || layout_per_stage) || vpp > 1 || pp < 2 {
            return None;
        }
        self.stage_layers(layers, pp)
            .ok()
            .map(|stages| (stages.first, stages.last))
    }

    /// Where Megatron puts the layers on `pp` stages, with Megatron's own refusals (as one-line
    /// messages naming the arguments).
    pub fn stage_layers(&self, layers: u32, pp: u32) -> Result<StageLayers, String> {
        if let Some(layout) = self.layout {
            if self.embedding_counted
                || self.loss_counted
                || self.first.is_some()
                || self.last.is_some()
            {
                return Err("--pipeline-model-parallel-layout cannot be combined with --decoder-first/last-pipeline-num-layers or --account-for-*-in-pipeline-split (Megatron-Core refuses it); keep the layout".into());
            }
            if layout.layers() != layers {
                return Err(format!(
                    "--pipeline-model-parallel-layout places {} layers, but the model has {layers}; make the layout's t counts add up to --num-layers",
                    layout.layers()
                ));
            }
            if pp == 0 || !layout.chunks.is_multiple_of(pp) {
                return Err(format!(
                    "--pipeline-model-parallel-layout has {} chunks, which is not a multiple of --pipeline-model-parallel-size {pp}; give pp x virtual stages entries",
                    layout.chunks
                ));
            }
            let vpp = layout.chunks / pp;
            if layout.heavier_leading > 0 {
                if !layout.heavier_leading.is_multiple_of(pp) {
                    return Err(format!(
                        "--pipeline-model-parallel-layout gives {} leading chunks {} layers and the rest {}, so its {pp} stages hold different layer counts; tpsim models unequal chunks in even stages, the heavier chunks filling whole rounds of {pp} (as `tpsim eval ... --emit megatron` writes them)",
                        layout.heavier_leading,
                        layout.per_chunk + 1,
                        layout.per_chunk
                    ));
                }
                let per_stage = layout.per_chunk * vpp + layout.heavier_leading / pp;
                return Ok(StageLayers {
                    first: per_stage,
                    middle: per_stage,
                    last: per_stage,
                });
            }
            if vpp == 1 && (layout.first_chunk == 0 || layout.last_chunk == 0) {
                return Err(format!(
                    "--pipeline-model-parallel-layout leaves the {} stage without a transformer layer; tpsim plans at least one layer per stage, so move a layer there (e.g. 't' before the 'm' or 'L')",
                    if layout.first_chunk == 0 {
                        "first"
                    } else {
                        "last"
                    }
                ));
            }
            return Ok(StageLayers {
                first: layout.first_chunk + layout.per_chunk * (vpp - 1),
                middle: layout.per_chunk * vpp,
                last: layout.per_chunk * (vpp - 1) + layout.last_chunk,
            });
        }
        if (self.first.is_some() || self.last.is_some())
            && (self.embedding_counted || self.loss_counted)
        {
            // transformer_config.py: "num_layers_in_first_pipeline_stage and
            // num_layers_in_last_pipeline_stage cannot be set at the same time with
            // account_for_embedding_in_pipeline_split and account_for_loss_in_pipeline_split".
            return Err("--decoder-first/last-pipeline-num-layers and --account-for-embedding/loss-in-pipeline-split cannot be used together (Megatron-Core refuses it); keep one kind".into());
        }
        if self.first.is_some() || self.last.is_some() {
            // Said before the counts: with pp 1 there are no other stages, and the counts' own
            // fix (a count that splits) is then refused by `check_split` for the pp.
            if pp < 2 {
                return Err(SPLIT_NEEDS_PIPELINE.into());
            }
            let mut rest = layers;
            let mut stages = pp;
            for (flag, value) in [
                ("decoder-first-pipeline-num-layers", self.first),
                ("decoder-last-pipeline-num-layers", self.last),
            ] {
                if let Some(v) = value {
                    if v > rest || stages == 0 {
                        let other = if flag.contains("first") {
                            self.last
                        } else {
                            self.first
                        };
                        return Err(format!(
                            "--{flag} {v} leaves too few of the {layers} layers for the other stages of --pipeline-model-parallel-size {pp}; {}",
                            first_last_fix(flag, layers, pp, other)
                        ));
                    }
                    rest -= v;
                    stages -= 1;
                }
            }
            if (rest == 0) != (stages == 0) || (stages > 0 && !rest.is_multiple_of(stages)) {
                // transformer_config.py: "Mismatch: {num_layers} middle layers remaining but
                // {pipeline_parallel_size} middle PP stages available", and the middle stages'
                // even split. Said with the values given and a count that splits (the message
                // named neither, and with pp 1 spoke of "0 other stages").
                let given: Vec<String> = [
                    ("decoder-first-pipeline-num-layers", self.first),
                    ("decoder-last-pipeline-num-layers", self.last),
                ]
                .iter()
                .filter_map(|(flag, v)| v.map(|v| format!("--{flag} {v}")))
                .collect();
                return Err(format!(
                    "{} {} {rest} of the {layers} layers for the {stages} other stage(s) of --pipeline-model-parallel-size {pp}, which Megatron-Core needs to split evenly, at least one layer each; {}",
                    given.join(" and "),
                    if given.len() == 1 { "leaves" } else { "leave" },
                    first_last_split_fix(layers, pp, self.first, self.last)
                ));
            }
            let each = rest.checked_div(stages).unwrap_or(0);
            return Ok(StageLayers {
                first: self.first.unwrap_or(each),
                middle: each,
                last: self.last.unwrap_or(each),
            });
        }
        let counted = self.counted_layers(layers);
        if !counted.is_multiple_of(pp) {
            return Err(if self.any() {
                format!(
                    "{counted} layers (with the embedding and/or loss counted by --account-for-*-in-pipeline-split) do not split evenly on --pipeline-model-parallel-size {pp} (Megatron-Core refuses it); use a pp that divides {counted}"
                )
            } else {
                format!(
                    "--pipeline-model-parallel-size {pp} does not divide {layers} layers (Megatron-LM refuses it); add --decoder-first/last-pipeline-num-layers or --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split"
                )
            });
        }
        let per = counted / pp;
        Ok(StageLayers {
            first: per - u32::from(self.embedding_counted),
            middle: per,
            last: per - u32::from(self.loss_counted),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filled_chunk_layouts_are_read_and_others_refused() {
        let layout = ChunkLayout::parse("'Et*4|t*4|t*4|t*1L'").unwrap();
        assert_eq!(
            layout,
            ChunkLayout {
                chunks: 4,
                first_chunk: 4,
                per_chunk: 4,
                last_chunk: 1,
                mtp_layers: 0,
                heavier_leading: 0,
            }
        );
        assert_eq!(layout.layers(), 13);
        // Megatron-Bridge's DeepSeek-V3 layout with its MTP layer before the loss.
        let mtp = ChunkLayout::parse("Et*4|t*4|t*4|t*1mL").unwrap();
        assert_eq!((mtp.layers(), mtp.mtp_layers), (13, 1));
        assert_eq!(ChunkLayout::parse("Ett|tt|tL").unwrap().layers(), 5);
        // Megatron-Core unrolls groups and counts, and ignores commas (`parse_str_to_list`).
        assert_eq!(
            ChunkLayout::parse("Et*4|(t*4|)*2,t*1L").unwrap(),
            ChunkLayout::parse("Et*4|t*4|t*4|t*1L").unwrap()
        );
        // Megatron-Bridge's DeepSeek-V3 layout on H100 at pp 8 x vp 4 (perf_recipes/deepseek/
        // h100/deepseek_v3.py): every unit counted, the last chunk only MTP and the loss.
        let units = ChunkLayout::parse("Et|(tt|)*30mL").unwrap();
        assert_eq!(
            units,
            ChunkLayout {
                chunks: 32,
                first_chunk: 1,
                per_chunk: 2,
                last_chunk: 0,
                mtp_layers: 1,
                heavier_leading: 0,
            }
        );
        assert_eq!(units.layers(), 61);
        // Balanced chunks: the leading ones a layer heavier (`StageLayout::balanced_chunks`);
        // whether they fill whole rounds of the pipeline is `SplitArgs::stage_layers`'s check.
        let balanced = ChunkLayout::parse("Et*6|t*6|t*5|t*5L").unwrap();
        assert_eq!((balanced.heavier_leading, balanced.per_chunk), (2, 5));
        assert_eq!(balanced.layers(), 22);
        for (text, why) in [
            ("Et*2|t*4|t*4|t*1L", "different numbers"),
            ("Et*3|t*4L", "different numbers"),
            ("Et*4|(t*4|*2t*1L", "not closed"),
            ("Et*4|((t*4|)*2)*2|t*1L", "do not nest"),
            ("Et*4|(t*4|)t*1L", "followed by *N"),
            ("Et*4|(t*4|)*99999999999999999999|L", "too large"),
            ("Et*4|(t*99999|)*99999|L", "more layers"),
            ("Et*4|t*4|t*1m|L", "right before the loss"),
            ("Et*4|t*m4|t*1L", "followed by a count"),
            ("t*4|t*4|t*1L", "embedding"),
            ("Et*4|t*4|t*1", "loss"),
            ("Et*4|t*x|t*1L", "count"),
            ("Et*4|x|t*1L", "'x' is not understood"),
            ("E|L", "no transformer layer"),
            ("Et*0|tL", "no transformer layer"),
            ("Et*99999999999|t*1L", "too large"),
            ("Et*99999|t*99999|t*1L", "more layers"),
        ] {
            let err = ChunkLayout::parse(text).unwrap_err();
            assert!(err.contains(why), "{text}: {err}");
        }
        let split = SplitArgs {
            layout: Some(layout),
            ..SplitArgs::default()
        };
        // 4 chunks on pp 2: 2 virtual stages, rank 1 holds chunks 1 and 3.
        assert_eq!(
            split.stage_layers(13, 2),
            Ok(StageLayers {
                first: 8,
                middle: 8,
                last: 5
            })
        );
        assert!(split.stage_layers(14, 2).is_err());
        assert!(split.stage_layers(13, 3).is_err());
        // One chunk per stage: the layout is the stage split itself.
        assert_eq!(
            split.stage_layers(13, 4),
            Ok(StageLayers {
                first: 4,
                middle: 4,
                last: 1
            })
        );
    }

    #[test]
    fn megatron_places_llama3_405b_like_the_paper() {
        // Dubey et al. 2024 §3.3.2: 126 layers on 16 stages, one fewer on the first and last.
        let both = SplitArgs {
            embedding_counted: true,
            loss_counted: true,
            ..SplitArgs::default()
        };
        assert_eq!(
            both.stage_layers(126, 16),
            Ok(StageLayers {
                first: 7,
                middle: 8,
                last: 7
            })
        );
        let first_last = SplitArgs {
            first: Some(7),
            last: Some(7),
            ..SplitArgs::default()
        };
        assert_eq!(both.stage_layers(126, 16), first_last.stage_layers(126, 16));
        let uneven_middles = SplitArgs {
            first: Some(6),
            last: Some(7),
            ..SplitArgs::default()
        };
        assert!(uneven_middles.stage_layers(126, 16).is_err());
    }
}
