//! `cueflow demo --sanitize`: the most common stream bug, caught. A copy stream uploads
//! chunks and a compute stream scales them — first without the event that orders the two (the
//! sanitizer refuses the kernel and explains the fix), then with it (silent, verified).

use cueflow::{kernels, Device, Error, PinnedBuffer, Result, SanitizeMode, Stream};

/// Elements of the example buffer.
const N: usize = 1 << 16;

/// Run the broken and the fixed program; returns the text to print.
pub fn show(dev: &Device) -> Result<String> {
    let before = dev.sanitize_mode();
    dev.set_sanitize(SanitizeMode::Error);
    let shown = broken_then_fixed(dev);
    dev.set_sanitize(before);
    shown
}

fn broken_then_fixed(dev: &Device) -> Result<String> {
    let copy = Stream::builder(dev).non_blocking().name("copy").build()?;
    let compute = Stream::builder(dev)
        .non_blocking()
        .name("compute")
        .build()?;
    let mut host = PinnedBuffer::from_slice(dev, &vec![1.0f32; N])?;
    let d = cueflow::DeviceBuffer::<f32>::new(dev, N)?;
    let mut s = String::from(
        "\nthe race sanitizer on the classic bug: a copy stream uploads, a compute\n\
         stream runs the kernel, and nothing orders the two:\n\n",
    );

    copy.copy_h2d(&d, &host)?;
    match kernels::scale(&compute, &d, 2.0) {
        Err(Error::Race(report)) => {
            for line in report.to_string().lines() {
                s += &format!("  {line}\n");
            }
        }
        Err(e) => return Err(e),
        Ok(()) => s += "  (no race reported: the sanitizer is broken)\n",
    }

    // The fix the report asks for: an event after the copy, waited on by the compute stream.
    let uploaded = copy.record()?;
    compute.wait_event(&uploaded)?;
    kernels::scale(&compute, &d, 2.0)?;
    compute.copy_d2h(&mut host, &d)?;
    let ok = host.read()?.iter().all(|&x| x == 2.0);
    s += &format!(
        "\nwith the event recorded and waited on, as the fix says: no report, and every element is \
         {} (checked)\n",
        if ok { "2.0" } else { "WRONG" }
    );
    if !ok {
        return Err(Error::Unsupported(
            "the fixed program computed wrong values".into(),
        ));
    }
    Ok(s)
}
