//! Modules and launches: loading and unloading images, functions by name, their parameters
//! (CUDA 12.4's `cuFuncGetParamInfo`), loading every function of a module at once (CUDA
//! 12.4), the dynamic shared memory limit, the driver's linker, and `cuLaunchKernel`.

use std::ffi::{c_uint, c_void, CStr};

use cudarc::driver::sys::{
    self, CUfunction, CUfunction_attribute, CUjitInputType, CUjit_option, CUlinkState, CUmodule,
    CUresult,
};

use super::library;
use super::version::{Feature, Func};
use super::{check, check_waited, CuError, CuResult, St};

/// Load a PTX text (NUL-terminated) or cubin image into the current context (D2). The error
/// keeps the driver's code (`CUDA_ERROR_INVALID_PTX`, `…_NO_BINARY_FOR_GPU`, …).
///
/// # Safety
/// `image` points to a complete image: NUL-terminated PTX, or an ELF cubin 8-byte aligned,
/// valid for the call.
pub(in crate::backend::cuda) unsafe fn load_data(image: *const c_void) -> CuResult<CUmodule> {
    let mut m: CUmodule = std::ptr::null_mut();
    // SAFETY: the caller's promise; D2; `m` is a valid out-pointer.
    check("cuModuleLoadData", unsafe {
        sys::cuModuleLoadData(&mut m, image)
    })?;
    Ok(m)
}

/// Unload `m`.
///
/// # Safety
/// `m` was loaded in the current context (D2), is unloaded once, and no kernel of it can
/// still run.
pub(in crate::backend::cuda) unsafe fn unload(m: CUmodule) -> CuResult<()> {
    // SAFETY: the caller's promise.
    check_waited("cuModuleUnload", || unsafe { sys::cuModuleUnload(m) })
}

/// Function `name` of `m` (D1, D2). `CUDA_ERROR_NOT_FOUND` when the module has none. Under
/// lazy loading this loads the function.
pub(in crate::backend::cuda) fn function(m: CUmodule, name: &CStr) -> CuResult<CUfunction> {
    let mut f: CUfunction = std::ptr::null_mut();
    // SAFETY: D1 (`m` is loaded), D2; `name` is NUL-terminated.
    check("cuModuleGetFunction", unsafe {
        sys::cuModuleGetFunction(&mut f, m, name.as_ptr())
    })?;
    Ok(f)
}

/// Load every function of `m` now (CUDA 12.4: `cuModuleGetFunctionCount`,
/// `cuModuleEnumerateFunctions`, `cuFuncLoad`); [missing](CuError::missing) on an older
/// driver, whose callers look functions up by name instead.
pub(in crate::backend::cuda) fn load_all_functions(m: CUmodule) -> CuResult<()> {
    if !library::api().supports(Feature::EagerLoading) {
        return Err(CuError::missing("cuModuleEnumerateFunctions"));
    }
    let mut count: c_uint = 0;
    // SAFETY: D1 (`m` is loaded), D2; the driver has the function (checked); `count` is a
    // valid out-pointer.
    check("cuModuleGetFunctionCount", unsafe {
        sys::cuModuleGetFunctionCount(&mut count, m)
    })?;
    let mut funcs: Vec<CUfunction> = vec![std::ptr::null_mut(); count as usize];
    // SAFETY: as above; `funcs` has room for the `count` handles asked for.
    check("cuModuleEnumerateFunctions", unsafe {
        sys::cuModuleEnumerateFunctions(funcs.as_mut_ptr(), count, m)
    })?;
    for f in funcs {
        // SAFETY: D1 (`f` is a function of the loaded module `m`), D2.
        check("cuFuncLoad", unsafe { sys::cuFuncLoad(f) })?;
    }
    Ok(())
}

/// The sizes of `func`'s parameters as the driver reports them (CUDA 12.4's
/// `cuFuncGetParamInfo`); `None` on an older driver, or when the driver cannot say.
pub(in crate::backend::cuda) fn param_sizes(func: CUfunction) -> Option<Vec<usize>> {
    if !library::api().has(Func::FuncGetParamInfo) {
        return None;
    }
    let mut sizes = Vec::new();
    for i in 0..1024usize {
        let (mut off, mut size) = (0usize, 0usize);
        // SAFETY: D1 (`func` is loaded), D2; the driver has the function (checked); the
        // out-pointers are valid.
        let r = unsafe { sys::cuFuncGetParamInfo(func, i, &mut off, &mut size) };
        match r {
            CUresult::CUDA_SUCCESS => sizes.push(size),
            // Past the last parameter.
            CUresult::CUDA_ERROR_INVALID_VALUE => return Some(sizes),
            _ => return None,
        }
    }
    None
}

/// Allow `func` up to `bytes` of dynamic shared memory (D1, D2).
pub(in crate::backend::cuda) fn set_max_dynamic_shared(
    func: CUfunction,
    bytes: i32,
) -> CuResult<()> {
    // SAFETY: D1, D2; too large a value is an error code.
    check("cuFuncSetAttribute", unsafe {
        sys::cuFuncSetAttribute(
            func,
            CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            bytes,
        )
    })
}

/// Launch `func` on `s` with grid and block dimensions, dynamic shared memory and one
/// pointer per parameter in `params`.
///
/// # Safety
/// `params` holds one pointer per kernel parameter, each to at least as many bytes as that
/// parameter's size, valid for the call (the driver copies them); the memory the kernel uses
/// stays valid until it completed (MM2); `func` and `s` are live (D1, D2).
#[inline]
pub(in crate::backend::cuda) unsafe fn launch(
    func: CUfunction,
    grid: [u32; 3],
    block: [u32; 3],
    shared: u32,
    s: St,
    params: *mut *mut c_void,
) -> CuResult<()> {
    let ([gx, gy, gz], [bx, by, bz]) = (grid, block);
    // SAFETY: the caller's promise; no `extra` options.
    check("cuLaunchKernel", unsafe {
        sys::cuLaunchKernel(
            func,
            gx,
            gy,
            gz,
            bx,
            by,
            bz,
            shared,
            s.0,
            params,
            std::ptr::null_mut(),
        )
    })
}

/// A linker invocation of the current context (D2) with JIT `options` and their `values`.
///
/// # Safety
/// `options` and `values` have equal lengths; every pointer a value holds (log buffers)
/// stays valid, at its given size, until [`link_destroy`].
pub(in crate::backend::cuda) unsafe fn link_create(
    options: &mut [CUjit_option],
    values: &mut [*mut c_void],
) -> CuResult<CUlinkState> {
    let mut state: CUlinkState = std::ptr::null_mut();
    // SAFETY: the caller's promise; D2; `state` is a valid out-pointer.
    check("cuLinkCreate", unsafe {
        sys::cuLinkCreate_v2(
            options.len() as u32,
            options.as_mut_ptr(),
            values.as_mut_ptr(),
            &mut state,
        )
    })?;
    Ok(state)
}

/// Add `data` (of kind `kind`, named `name` in logs) to a linker invocation.
///
/// # Safety
/// `state` is a live invocation; `data` holds a complete input of `kind` (PTX NUL-terminated).
pub(in crate::backend::cuda) unsafe fn link_add_data(
    state: CUlinkState,
    kind: CUjitInputType,
    data: &mut [u8],
    name: &CStr,
) -> CuResult<()> {
    // SAFETY: the caller's promise; no per-input options.
    check("cuLinkAddData", unsafe {
        sys::cuLinkAddData_v2(
            state,
            kind,
            data.as_mut_ptr() as *mut c_void,
            data.len(),
            name.as_ptr(),
            0,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    })
}

/// Finish a linker invocation: the linked cubin, copied out of the invocation.
///
/// # Safety
/// `state` is a live invocation with every input added.
pub(in crate::backend::cuda) unsafe fn link_complete(state: CUlinkState) -> CuResult<Vec<u8>> {
    let mut cubin: *mut c_void = std::ptr::null_mut();
    let mut size = 0usize;
    // SAFETY: the caller's promise; valid out-pointers.
    check("cuLinkComplete", unsafe {
        sys::cuLinkComplete(state, &mut cubin, &mut size)
    })?;
    if cubin.is_null() {
        return Err(CuError::new(
            "cuLinkComplete",
            CUresult::CUDA_ERROR_INVALID_IMAGE,
        ));
    }
    // SAFETY: the driver points `cubin` at `size` bytes owned by `state`, which is live;
    // copied before it can be destroyed.
    Ok(unsafe { std::slice::from_raw_parts(cubin as *const u8, size) }.to_vec())
}

/// Destroy a linker invocation (and the cubin [`link_complete`] pointed into).
///
/// # Safety
/// `state` came from [`link_create`] and is destroyed once.
pub(in crate::backend::cuda) unsafe fn link_destroy(state: CUlinkState) {
    // SAFETY: the caller's promise.
    let _ = unsafe { sys::cuLinkDestroy(state) };
}
