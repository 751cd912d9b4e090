//! A stream-ordered memory pool as the api holds it (MM1, HM5): core's handle on the backend's
//! pool, so that the api names no backend type. Its calls are the backend pool's, through
//! `Deref`.

use std::ops::Deref;
use std::sync::Arc;

use crate::backend::contract::pool::BackendPool;

/// One stream-ordered pool of a device's memory.
#[derive(Clone)]
pub(crate) struct PoolCore(Arc<dyn BackendPool>);

impl PoolCore {
    pub(crate) fn new(pool: Arc<dyn BackendPool>) -> PoolCore {
        PoolCore(pool)
    }
}

impl Deref for PoolCore {
    type Target = dyn BackendPool;

    fn deref(&self) -> &Self::Target {
        self.0.as_ref()
    }
}
