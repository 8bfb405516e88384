#!/usr/bin/env python3
"""The source tree's rules (docs/ARCHITECTURE.md, "Layers"), checked on
every file git tracks or would track (untracked files not ignored too):

- a folder of the library includes only folders of its own rank or below:
  base < ctl (the daemon client) and chan (channels) < sock and the transport interface
  (transport/transport.h, transport/registry.c) < each transport
  (transport/<name>/) < core < interpose; a transport includes no other
  transport; the daemon and the
  CLI include nothing of the library, nor the library of them, and
  src/common/ (everyone's) includes none of them;
- no source file passes 800 lines;
- no build output is tracked: nothing under a build folder, no object,
  library or ELF file.

Usage: tests/unit/layout.py [--root DIR]; exit status 1 on any breach.
--self-test: builds a small tree with one breach of each kind and checks
that each is reported (and that a clean tree passes)."""
import os
import re
import subprocess
import sys

MAX_LINES = 800
SOURCE_EXT = ('.c', '.h', '.py', '.sh', '.js', '.java')
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def rank(path):
    """The layer of a path under src/ (a file or an included header)."""
    if path.startswith('lib/base/'):
        return 0
    if path.startswith('lib/ctl/') or path.startswith('lib/chan/'):
        return 1
    if path.startswith('lib/sock/') or path in ('lib/transport/transport.h', 'lib/transport/registry.c'):
        return 2
    if path.startswith('lib/transport/') and path.count('/') >= 3:
        return 3
    if path.startswith('lib/core/'):
        return 4
    if path.startswith('lib/interpose/'):
        return 5
    return None


def transport_of(path):
    return path.split('/')[2]


def include_breaches(rel, text):
    out = []
    part = rel.split('/')[0]
    for inc in INCLUDE.findall(text):
        top = inc.split('/')[0]
        if part in ('daemon', 'cli'):
            if top == 'lib':
                out.append(f'includes {inc} (the library)')
            continue
        if part == 'common':
            if top in ('lib', 'daemon', 'cli'):
                out.append(f'includes {inc} (common/ includes none of lib/, daemon/, cli/)')
            continue
        if top in ('daemon', 'cli'):
            out.append(f'includes {inc} (the daemon or the CLI)')
            continue
        mine, theirs = rank(rel), rank(inc)
        if mine is None or theirs is None:
            continue
        if theirs > mine:
            out.append(f'(rank {mine}) includes {inc} (rank {theirs}, above it)')
        elif mine == 3 and theirs == 3 and transport_of(rel) != transport_of(inc):
            out.append(f'includes {inc} (another transport)')
    return out


def is_build_output(f, root):
    parts = f.split('/')
    if any(p == 'build' or p.startswith('build-') for p in parts[:-1]):
        return 'under a build folder'
    if f.endswith(('.o', '.so', '.a', '.pyc')):
        return 'an object or library'
    try:
        with open(os.path.join(root, f), 'rb') as fh:
            if fh.read(4) == b'\x7fELF':
                return 'an ELF file'
    except OSError:
        pass
    return None


def self_test():
    import tempfile
    ok = True
    breaches = {
        'src/lib/sock/a.c': '#include "lib/core/env.h"\n',
        'src/lib/transport/one/b.c': '#include "lib/transport/two/two.h"\n',
        'src/lib/base/c.c': '#include "lib/sock/sock.h"\n',
        'src/lib/ctl/h.c': '#include "lib/sock/sock.h"\n',
        'src/daemon/d.c': '#include "lib/base/real.h"\n',
        'src/common/e.c': '#include "daemon/server.h"\n',
        'src/lib/core/long.c': 'x\n' * (MAX_LINES + 1),
        'build-asan/tests/t': 'x',
        'tools/prog': '\x7fELF....',
        'src/x.o': 'x',
    }
    clean = {
        'src/lib/interpose/i.c': '#include "lib/core/env.h"\n#include "lib/base/real.h"\n',
        'src/lib/transport/one/f.c': '#include "lib/transport/one/one.h"\n#include "lib/sock/sock.h"\n'
                                     '#include "lib/ctl/ctl.h"\n#include "lib/transport/transport.h"\n',
        'src/lib/sock/g.c': '#include "lib/transport/transport.h"\n#include "lib/ctl/ctl.h"\n',
        'src/lib/core/ok.c': 'x\n' * MAX_LINES,
    }
    for files, want_bad in ((clean, False), ({**clean, **breaches}, True)):
        with tempfile.TemporaryDirectory() as d:
            subprocess.run(['git', 'init', '-q', d], check=True)
            for f, body in files.items():
                os.makedirs(os.path.dirname(os.path.join(d, f)), exist_ok=True)
                with open(os.path.join(d, f), 'w', encoding='latin-1') as fh:
                    fh.write(body)
            r = subprocess.run([sys.executable, __file__, '--root', d], capture_output=True, text=True)
            out = r.stdout
            if not want_bad:
                if r.returncode != 0:
                    print('layout self-test: a clean tree failed:\n' + out)
                    ok = False
                continue
            for f in breaches:
                if f not in out:
                    print(f'layout self-test: {f} not reported')
                    ok = False
            for f in clean:
                if f in out:
                    print(f'layout self-test: {f} reported though clean')
                    ok = False
            if r.returncode == 0:
                print('layout self-test: breaches passed')
                ok = False
    print('layout self-test: %s (%d breaches, each reported; a clean tree passes)' %
          ('ok' if ok else 'FAILED', len(breaches)))
    return 0 if ok else 1


def main():
    if '--self-test' in sys.argv:
        return self_test()
    root = sys.argv[sys.argv.index('--root') + 1] if '--root' in sys.argv else \
        os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..')
    files = subprocess.run(['git', '-C', root, 'ls-files', '-co', '--exclude-standard'],
                           check=True, capture_output=True, text=True).stdout.split()
    files = [f for f in files if os.path.isfile(os.path.join(root, f))]
    bad = []
    nsrc = 0
    for f in files:
        why = is_build_output(f, root)
        if why:
            bad.append(f'{f}: build output tracked ({why})')
            continue
        if not (f.endswith(SOURCE_EXT) or os.path.basename(f) == 'Makefile'):
            continue
        with open(os.path.join(root, f), encoding='utf-8', errors='replace') as fh:
            text = fh.read()
        n = text.count('\n')
        if n > MAX_LINES:
            bad.append(f'{f}: {n} lines (at most {MAX_LINES})')
        if f.startswith('src/') and f.endswith(('.c', '.h')):
            nsrc += 1
            bad += [f'{f}: {b}' for b in include_breaches(f[len('src/'):], text)]
    for b in bad:
        print('layout:', b)
    if not bad:
        print(f'layout: {nsrc} source files in src/: layers, lengths and tracked files as documented')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
