"""Lists where a sm_90a cubin's kernels wait for their wgmma groups, without a disassembler (the
build machine's toolkit has ptxas but no cuobjdump or nvdisasm): one line a WARPGROUP.DEPBAR,

    KERNEL: wait N after M MUFU

N the wait's count (at most N groups left pending) and M the special-function instructions
(MUFU: ex2, rcp, ...) scheduled since the previous wait or the kernel's start, so a FileCheck test
can pin which arithmetic ptxas put before a wait (hexel::wgmma::wait_group_after).

    python3 sass_waits.py CUBIN

sm_90a SASS facts this reads (taken from `cuobjdump -sass` of CUDA 13 cubins): instructions are
16 bytes in the kernel's `.text.NAME` section; the opcode is the low 12 bits of the first
little-endian 64-bit word; 0x9c5 is WARPGROUP.ARRIVE or, with bit 47 of that word set,
WARPGROUP.DEPBAR.LE gsb0 with its count in bits 8-15 of the second word; 0x308 is MUFU.
"""
import struct
import sys


def text_sections(data):
    """{kernel name: code} from an ELF64 cubin's .text.NAME sections."""
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise ValueError("not an ELF64 file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_at = headers[shstrndx][4]
    out = {}
    for name, _, _, _, offset, size in headers:
        end = data.index(b"\0", names_at + name)
        section = data[names_at + name:end].decode()
        if section.startswith(".text."):
            out[section[len(".text."):]] = data[offset:offset + size]
    return out


def waits(code):
    """[(count, MUFUs since the previous wait)] in program order."""
    found, mufu = [], 0
    for i in range(0, len(code), 16):
        lo, hi = struct.unpack_from("<QQ", code, i)
        op = lo & 0xFFF
        if op == 0x308:
            mufu += 1
        elif op == 0x9C5 and (lo >> 47) & 1:
            found.append(((hi >> 8) & 0xFF, mufu))
            mufu = 0
    return found


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: sass_waits.py CUBIN")
    with open(sys.argv[1], "rb") as f:
        sections = text_sections(f.read())
    for kernel, code in sections.items():
        for count, mufu in waits(code):
            print(f"{kernel}: wait {count} after {mufu} MUFU")


if __name__ == "__main__":
    main()
