//! The CUDA backend (placeholder until the driver-API implementation lands).

use std::sync::Arc;

use crate::backend::Backend;
use crate::error::{Error, Result};

pub(crate) fn open(_device_id: u64, _ordinal: usize) -> Result<Arc<dyn Backend>> {
    Err(Error::Unavailable(
        "the CUDA backend is not built yet".into(),
    ))
}
