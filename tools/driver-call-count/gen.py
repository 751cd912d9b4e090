# Stubs for every driver function: count the call, then jump to the real function (count.c
# resolves the pointers at load time). usage: gen.py SYMS > stubs.S
import sys
names = [l.strip() for l in open(sys.argv[1]) if l.strip()]
n = max(1, len(names))
print(".text")
for i, name in enumerate(names):
    # Not atomic: a count may miss a call made at the same moment on another thread.
    print(f".globl {name}\n.type {name},@function\n{name}:\n"
          f"  incq cc_counts+{8*i}(%rip)\n  jmp *cc_ptrs+{8*i}(%rip)")
print(f".data\n.globl cc_ptrs\n.hidden cc_ptrs\ncc_ptrs:\n  .zero {8*n}")
print(f".globl cc_counts\n.hidden cc_counts\ncc_counts:\n  .zero {8*n}")
print(".section .rodata\n.globl cc_names\n.hidden cc_names\ncc_names:")
for name in names:
    print(f'  .asciz "{name}"')
print(f".globl cc_count\n.hidden cc_count\ncc_count:\n  .long {len(names)}")
print('.section .note.GNU-stack,"",@progbits')
