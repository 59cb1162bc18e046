//! Whether the framework (the 2021 Megatron-LM has no low-precision GEMMs) and the GPU
//! (`GpuProfile::supports`) can run a [`Precision`].

use crate::cluster::Cluster;

use super::error::PlanError;
use super::request::Precision;

/// The framework can train at `precision`: the 2021 Megatron-LM has no low-precision GEMMs.
/// `eval` meets it building the plan, `plan` before its search.
pub fn check_precision_framework(
    framework: crate::training::TrainingFramework,
    precision: Precision,
) -> Result<(), PlanError> {
    if framework == crate::training::TrainingFramework::MegatronLm2021
        && precision != Precision::Bf16
    {
        return Err(PlanError::LowPrecisionIn2021 {
            precision: precision.as_str(),
        });
    }
    Ok(())
}

/// The GPU has tensor cores for `precision` (`GpuProfile::supports`), or the error that names the
/// formats it does have. `eval` meets it building the plan, `plan` before its search.
pub fn check_precision(cluster: &Cluster, precision: Precision) -> Result<(), PlanError> {
    if let Err(why) = cluster.gpu.supports(precision) {
        let valid: Vec<&str> = Precision::ALL
            .into_iter()
            .filter(|p| cluster.gpu.supports(*p).is_ok())
            .map(Precision::as_str)
            .collect();
        return Err(PlanError::PrecisionGpu {
            precision: precision.as_str(),
            gpu: cluster.gpu.name.clone(),
            why,
            valid: valid.join(", "),
        });
    }
    Ok(())
}
