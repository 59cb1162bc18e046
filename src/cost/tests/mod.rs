//! Unit tests of the per-micro-batch unit costs (`unit_costs.rs`), grouped by topic.

mod gradient_passes;
mod tp_collectives;
