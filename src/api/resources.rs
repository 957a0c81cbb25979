//! Resource amounts (CPU milli, memory bytes, GPUs) read from Kubernetes resource maps.

use std::collections::BTreeMap;
use std::ops::{Add, AddAssign, Sub, SubAssign};

use k8s_openapi::apimachinery::pkg::api::resource::Quantity as KubeQuantity;

use super::{FieldError, Quantity, QuantityError};

/// Extended resource names read as GPUs.
pub const GPU_RESOURCE_NAMES: [&str; 2] = ["nvidia.com/gpu", "alpha.kubernetes.io/nvidia-gpu"];

/// An amount of CPU (millicores), memory (bytes) and GPUs (devices).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct Resources {
    pub cpu_milli: i64,
    pub memory: i64,
    pub gpu: i64,
}

impl Resources {
    /// No resources.
    pub const ZERO: Resources = Resources {
        cpu_milli: 0,
        memory: 0,
        gpu: 0,
    };

    /// A resource amount.
    pub const fn new(cpu_milli: i64, memory: i64, gpu: i64) -> Self {
        Resources {
            cpu_milli,
            memory,
            gpu,
        }
    }

    /// Whether `self` fits in `free` on every resource.
    pub fn fits_in(&self, free: &Resources) -> bool {
        self.cpu_milli <= free.cpu_milli && self.memory <= free.memory && self.gpu <= free.gpu
    }

    /// How many of `self` fit in `room` (a resource `self` does not need never limits it;
    /// an all-zero `self` fits `u32::MAX` times).
    pub fn fit_count(&self, room: &Resources) -> i64 {
        let per = |need: i64, have: i64| {
            if need <= 0 {
                i64::from(u32::MAX)
            } else {
                (have / need).max(0)
            }
        };
        per(self.cpu_milli, room.cpu_milli)
            .min(per(self.memory, room.memory))
            .min(per(self.gpu, room.gpu))
    }

    /// Per-resource maximum.
    pub fn max(self, other: Resources) -> Resources {
        Resources {
            cpu_milli: self.cpu_milli.max(other.cpu_milli),
            memory: self.memory.max(other.memory),
            gpu: self.gpu.max(other.gpu),
        }
    }

    /// `self` times `n`.
    pub fn times(self, n: i64) -> Resources {
        Resources {
            cpu_milli: self.cpu_milli.saturating_mul(n),
            memory: self.memory.saturating_mul(n),
            gpu: self.gpu.saturating_mul(n),
        }
    }

    /// Whether any amount is below zero.
    pub fn any_negative(&self) -> bool {
        self.cpu_milli < 0 || self.memory < 0 || self.gpu < 0
    }

    /// Whether every amount is zero.
    pub fn is_zero(&self) -> bool {
        *self == Resources::ZERO
    }
}

impl Add for Resources {
    type Output = Resources;
    fn add(self, o: Resources) -> Resources {
        Resources {
            cpu_milli: self.cpu_milli.saturating_add(o.cpu_milli),
            memory: self.memory.saturating_add(o.memory),
            gpu: self.gpu.saturating_add(o.gpu),
        }
    }
}

impl AddAssign for Resources {
    fn add_assign(&mut self, o: Resources) {
        *self = *self + o;
    }
}

impl Sub for Resources {
    type Output = Resources;
    fn sub(self, o: Resources) -> Resources {
        Resources {
            cpu_milli: self.cpu_milli.saturating_sub(o.cpu_milli),
            memory: self.memory.saturating_sub(o.memory),
            gpu: self.gpu.saturating_sub(o.gpu),
        }
    }
}

impl SubAssign for Resources {
    fn sub_assign(&mut self, o: Resources) {
        *self = *self - o;
    }
}

/// Parses one named quantity of a resource map; absent is zero.
pub fn read_quantity(
    map: Option<&BTreeMap<String, KubeQuantity>>,
    name: &str,
    object: &str,
    field: &str,
) -> Result<Quantity, FieldError> {
    match map.and_then(|m| m.get(name)) {
        None => Ok(Quantity::ZERO),
        Some(q) => Quantity::parse(&q.0)
            .map_err(|e| FieldError::new(object, format!("{field}.{name}"), e.to_string())),
    }
}

/// Reads CPU (milli, ceil), memory (bytes, ceil) and GPUs (devices, ceil; `nvidia.com/gpu`, else
/// the legacy name), each saturating at `i64::MAX`, from a resource map such as `requests`,
/// `limits`, `allocatable` or `overhead`.
pub fn resources_of(
    map: Option<&BTreeMap<String, KubeQuantity>>,
    object: &str,
    field: &str,
) -> Result<Resources, FieldError> {
    parse_resources(map)
        .map_err(|(name, e)| FieldError::new(object, format!("{field}.{name}"), e.to_string()))
}

/// [`resources_of`] without the error context, for hot paths that add it only on failure: the
/// error is the resource name and why its quantity was rejected. An amount past i64 (CPU past
/// 9.2e15 cores in millicores, as `1E`) saturates at `i64::MAX`: the API server accepts it.
pub fn parse_resources(
    map: Option<&BTreeMap<String, KubeQuantity>>,
) -> Result<Resources, (&'static str, QuantityError)> {
    let Some(map) = map else {
        return Ok(Resources::ZERO);
    };
    let read = |name: &'static str| match map.get(name) {
        None => Ok(Quantity::ZERO),
        Some(q) => Quantity::parse(&q.0).map_err(|e| (name, e)),
    };
    let cpu_milli = read("cpu")?.milli_ceil();
    let memory = read("memory")?;
    let mut gpu = Quantity::ZERO;
    for name in GPU_RESOURCE_NAMES {
        let q = read(name)?;
        if q != Quantity::ZERO {
            gpu = q;
            break;
        }
    }
    Ok(Resources {
        cpu_milli,
        memory: memory.value_ceil(),
        gpu: gpu.value_ceil(),
    })
}
