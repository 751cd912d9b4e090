//! [`Device`]: one device of one backend, opened by name (`host`, `cuda:N`) or from the
//! `CUEFLOW_DEVICE` environment variable.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::api::stream::StreamCore;
use crate::backend::host::HostBackend;
use crate::backend::{Backend, DeviceProperties, StreamKind};
use crate::core::capture::CaptureRegistry;
use crate::core::hostfn::check_not_in_host_fn;
use crate::core::recorder::Recorder;
use crate::error::{Error, Result};
use crate::trace::Trace;

static NEXT_DEVICE_ID: AtomicU64 = AtomicU64::new(1);

/// Which backend and device to open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceSpec {
    /// The host backend (threads and engines on this machine).
    Host,
    /// CUDA device with this ordinal.
    Cuda(usize),
}

impl std::str::FromStr for DeviceSpec {
    type Err = Error;

    /// Parse `host`, `cuda` (= `cuda:0`) or `cuda:N`.
    fn from_str(s: &str) -> Result<Self> {
        let t = s.trim().to_ascii_lowercase();
        match t.as_str() {
            "host" | "cpu" => Ok(DeviceSpec::Host),
            "cuda" => Ok(DeviceSpec::Cuda(0)),
            _ => t
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(DeviceSpec::Cuda)
                .ok_or_else(|| Error::UnknownDevice(s.to_string())),
        }
    }
}

impl std::fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceSpec::Host => write!(f, "host"),
            DeviceSpec::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

/// A device: the place streams, events and memory belong to. Cheap to clone.
///
/// ```
/// let dev = cueflow::Device::host()?;
/// println!("{} with {} engines", dev.properties().name, dev.properties().async_engines);
/// dev.synchronize()?;
/// # Ok::<(), cueflow::Error>(())
/// ```
#[derive(Clone)]
pub struct Device {
    pub(crate) inner: Arc<DeviceInner>,
}

pub(crate) struct DeviceInner {
    pub id: u64,
    pub spec: DeviceSpec,
    pub backend: Arc<dyn Backend>,
    pub legacy: Arc<StreamCore>,
    pub next_stream: AtomicU64,
    pub tracing: AtomicBool,
    pub recorder: Mutex<Option<Arc<Recorder>>>,
    pub trace_path: Option<PathBuf>,
    pub captures: CaptureRegistry,
    pub watcher: crate::api::future::Watcher,
    /// Reusable events for pinned-memory access logs (MM3).
    pub event_pool: crate::core::access::EventPool,
    /// Private stream that snapshots events for completions (created on first use).
    pub notifier: std::sync::OnceLock<Arc<dyn crate::backend::BackendStream>>,
}

impl Drop for DeviceInner {
    fn drop(&mut self) {
        if let (Some(path), Some(rec)) = (&self.trace_path, self.recorder.lock().take()) {
            // Dropped inside a host function (its closure held the last handle): waiting for the
            // device would wait for that very host function; write what has completed.
            if check_not_in_host_fn("drop").is_ok() {
                let _ = self.backend.synchronize();
            }
            let trace = rec.collect();
            if let Err(e) = crate::trace::chrome::write_chrome_json(&trace, path) {
                eprintln!(
                    "cueflow: could not write CUEFLOW_TRACE={}: {e}",
                    path.display()
                );
            }
        }
    }
}

impl Device {
    /// Open the host backend's device with one compute worker per core.
    pub fn host() -> Result<Device> {
        Self::host_with_workers(0)
    }

    /// Open a host device with `workers` compute workers (0: one per core, at least 2).
    pub fn host_with_workers(workers: usize) -> Result<Device> {
        let id = NEXT_DEVICE_ID.fetch_add(1, Ordering::Relaxed);
        let backend = HostBackend::open(id, workers)?;
        Self::wrap(id, DeviceSpec::Host, Arc::new(backend))
    }

    /// Open CUDA device `ordinal`. Fails with [`Error::Unavailable`] when the driver library or
    /// the device is missing, or the crate was built without the `cuda` feature.
    pub fn cuda(ordinal: usize) -> Result<Device> {
        #[cfg(feature = "cuda")]
        {
            let id = NEXT_DEVICE_ID.fetch_add(1, Ordering::Relaxed);
            let backend = crate::backend::cuda::open(id, ordinal)?;
            Self::wrap(id, DeviceSpec::Cuda(ordinal), backend)
        }
        #[cfg(not(feature = "cuda"))]
        {
            let _ = ordinal;
            Err(Error::Unavailable(
                "cueflow was built without the `cuda` feature".into(),
            ))
        }
    }

    /// Open the device a [`DeviceSpec`] names.
    pub fn open(spec: DeviceSpec) -> Result<Device> {
        match spec {
            DeviceSpec::Host => Self::host(),
            DeviceSpec::Cuda(n) => Self::cuda(n),
        }
    }

    /// Open the device named by a string: `host`, `cuda` or `cuda:N`.
    pub fn open_str(name: &str) -> Result<Device> {
        Self::open(name.parse()?)
    }

    /// Open the device named by `CUEFLOW_DEVICE` (default: `host`).
    pub fn from_env() -> Result<Device> {
        match std::env::var("CUEFLOW_DEVICE") {
            Ok(v) if !v.trim().is_empty() => Self::open_str(&v),
            _ => Self::host(),
        }
    }

    fn wrap(id: u64, spec: DeviceSpec, backend: Arc<dyn Backend>) -> Result<Device> {
        let legacy = StreamCore::new(0, backend.legacy_stream(), StreamKind::Legacy, 0);
        let trace_path = std::env::var_os("CUEFLOW_TRACE")
            .filter(|p| !p.is_empty())
            .map(PathBuf::from);
        let dev = Device {
            inner: Arc::new(DeviceInner {
                id,
                spec,
                backend,
                legacy: Arc::new(legacy),
                next_stream: AtomicU64::new(1),
                tracing: AtomicBool::new(false),
                recorder: Mutex::new(None),
                trace_path,
                captures: CaptureRegistry::default(),
                watcher: Default::default(),
                event_pool: Default::default(),
                notifier: std::sync::OnceLock::new(),
            }),
        };
        if dev.inner.trace_path.is_some() {
            dev.start_trace()?;
        }
        Ok(dev)
    }

    /// What the device is and can do.
    pub fn properties(&self) -> &DeviceProperties {
        self.inner.backend.properties()
    }

    /// The spec this device was opened with.
    pub fn spec(&self) -> DeviceSpec {
        self.inner.spec
    }

    /// Block until all work on every stream of the device is done (ST9). Refused inside host
    /// functions (HF2) and during stream captures that forbid it (GR2).
    pub fn synchronize(&self) -> Result<()> {
        check_not_in_host_fn("Device::synchronize")?;
        self.inner
            .captures
            .check_unsafe_call("device synchronize")?;
        self.inner.backend.synchronize()
    }

    /// The sticky error that poisoned this device, if any (KN2, ER2).
    pub fn sticky_error(&self) -> Option<Error> {
        self.inner.backend.sticky_error()
    }

    /// Nanoseconds on the device's host clock (the clock traces use).
    pub fn now_ns(&self) -> u64 {
        self.inner.backend.now_ns()
    }

    /// Start recording a trace of every operation (replaces a trace in progress).
    pub fn start_trace(&self) -> Result<()> {
        check_not_in_host_fn("Device::start_trace")?;
        let rec = Arc::new(Recorder::new(self.properties().name.clone()));
        rec.name_stream(0, "legacy default stream".into());
        if self.properties().backend != "host" {
            let ev = self.inner.backend.create_event(Default::default())?;
            self.inner.backend.legacy_stream().record(&ev)?;
            ev.synchronize()?;
            rec.set_anchor(ev, self.now_ns());
        }
        *self.inner.recorder.lock() = Some(rec);
        self.inner.tracing.store(true, Ordering::Release);
        Ok(())
    }

    /// Stop tracing and return what was recorded. Synchronizes the device first so every
    /// operation has its times. Returns an empty trace when tracing was off.
    pub fn stop_trace(&self) -> Result<Trace> {
        check_not_in_host_fn("Device::stop_trace")?;
        self.inner
            .captures
            .check_unsafe_call("stop_trace (synchronizes the device)")?;
        self.inner.tracing.store(false, Ordering::Release);
        let rec = self.inner.recorder.lock().take();
        match rec {
            Some(r) => {
                self.inner.backend.synchronize()?;
                Ok(r.collect())
            }
            None => Ok(Trace::default()),
        }
    }

    pub(crate) fn recorder(&self) -> Option<Arc<Recorder>> {
        if self.inner.tracing.load(Ordering::Relaxed) {
            self.inner.recorder.lock().clone()
        } else {
            None
        }
    }

    pub(crate) fn id(&self) -> u64 {
        self.inner.id
    }

    pub(crate) fn same(&self, other: &Device) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Device({}, {})", self.inner.spec, self.properties().name)
    }
}
