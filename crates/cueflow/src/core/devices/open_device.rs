//! The device as the API opens it: the device core every stream, event and capture takes,
//! and the legacy default stream (ST4) that belongs to it. Above streams, so that the device
//! core below them need not know what a stream is.

use std::any::Any;
use std::ops::Deref;
use std::sync::{Arc, OnceLock};

use crate::backend::contract::device::Backend;
use crate::core::devices::device::{DeviceCore, DeviceSpec, NewStream, LEGACY_STREAM_NAME};
use crate::core::streams::stream::StreamCore;
use crate::error::Result;
use crate::types::StreamKind;

/// An open device: its core and its legacy default stream.
pub(crate) struct OpenDevice {
    pub core: Arc<DeviceCore>,
    pub legacy: Arc<StreamCore>,
    /// What another library keeps for this device (cudarc's context object), set once by the
    /// interop layer of the API.
    #[cfg_attr(not(feature = "cudarc-interop"), allow(dead_code))]
    // Used by the cudarc interop.
    pub interop: OnceLock<Box<dyn Any + Send + Sync>>,
}

impl OpenDevice {
    /// Open the device `spec` names; a host device gets `host_workers` compute workers (0: the
    /// default).
    pub fn open_spec(spec: DeviceSpec, host_workers: usize) -> Result<Arc<OpenDevice>> {
        let id = DeviceCore::next_id();
        let backend = DeviceCore::open_backend(id, spec, host_workers)?;
        Self::open(id, spec, backend)
    }

    /// Wrap an opened backend: the device core, then its legacy stream, known to tracking
    /// before the first call (and to a trace `CUEFLOW_TRACE` starts).
    fn open(id: u64, spec: DeviceSpec, backend: Arc<dyn Backend>) -> Result<Arc<OpenDevice>> {
        let legacy = NewStream {
            id: 0,
            backend: backend.legacy_stream(),
            kind: StreamKind::Legacy,
            priority: 0,
            name: LEGACY_STREAM_NAME.into(),
        };
        let legacy = Arc::new(StreamCore::new(legacy, spec.to_string().into()));
        let core = DeviceCore::new(id, spec, backend, legacy.actor)?;
        let _ = legacy.tracking.set(core.track.register_stream(&legacy));
        core.start_env_trace()?;
        Ok(Arc::new(OpenDevice {
            core,
            legacy,
            interop: OnceLock::new(),
        }))
    }

    /// Create a stream (priority already clamped by the caller, ST7).
    pub fn create_stream(
        &self,
        kind: StreamKind,
        priority: i32,
        name: Option<String>,
    ) -> Result<Arc<StreamCore>> {
        Ok(self.register(self.core.new_backend_stream(kind, priority, name)?))
    }

    /// Wrap a stream created elsewhere (interop): a stream like the others, except that its
    /// creator destroys it; `owner` (what keeps it alive) is kept until the stream is done.
    pub fn adopt_stream(
        &self,
        raw: *mut std::ffi::c_void,
        owner: Option<Arc<dyn Any + Send + Sync>>,
    ) -> Result<Arc<StreamCore>> {
        Ok(self.register(self.core.adopt_backend_stream(raw, owner)?))
    }

    fn register(&self, n: NewStream) -> Arc<StreamCore> {
        let s = Arc::new(StreamCore::new(n, self.core.spec.to_string().into()));
        let _ = s.tracking.set(self.core.track.register_stream(&s));
        s
    }
}

impl Deref for OpenDevice {
    type Target = DeviceCore;

    fn deref(&self) -> &DeviceCore {
        &self.core
    }
}
