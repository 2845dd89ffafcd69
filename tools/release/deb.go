package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// debPackage is one line of build/image-packages.lock.
type debPackage struct {
	Name, Version, Arch, SHA256 string
}

// File is the name `apt-get download` gives the package (an epoch's colon as %3a).
func (p debPackage) File() string {
	return fmt.Sprintf("%s_%s_%s.deb", p.Name, strings.ReplaceAll(p.Version, ":", "%3a"), p.Arch)
}

func readLock(file string) ([]debPackage, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var pkgs []debPackage
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 4 || len(f[3]) != 64 {
			return nil, fmt.Errorf("%s:%d: want \"name version arch sha256\", got %q", file, n, line)
		}
		pkgs = append(pkgs, debPackage{Name: f[0], Version: f[1], Arch: f[2], SHA256: f[3]})
	}
	return pkgs, sc.Err()
}

// findPackage returns the locked package name for arch.
func findPackage(pkgs []debPackage, name, arch string) (debPackage, error) {
	for _, p := range pkgs {
		if p.Name == name && p.Arch == arch {
			return p, nil
		}
	}
	return debPackage{}, fmt.Errorf("no %s for %s in the package lock", name, arch)
}

// unpackDeb adds to fs the files of the package (downloaded into dir) that keep says to
// keep, after checking the .deb against the lock's sha256. dpkg-deb reads the package
// (its data member is xz-compressed); the owners, modes and links come from the package.
func unpackDeb(fs rootFS, dir string, p debPackage, keep func(string) bool) error {
	file := filepath.Join(dir, p.File())
	b, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("%w (run make image-debs)", err)
	}
	if got := fmt.Sprintf("%x", sha256.Sum256(b)); got != p.SHA256 {
		return fmt.Errorf("%s: sha256 %s, the lock says %s", file, got, p.SHA256)
	}
	cmd := exec.Command("dpkg-deb", "--fsys-tarfile", file)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("dpkg-deb --fsys-tarfile %s: %w", file, err)
	}
	tr := tar.NewReader(&out)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		name := clean(h.Name)
		if name == "/" || !keep(name) {
			continue
		}
		switch h.Typeflag {
		case tar.TypeDir:
			fs.dir(name, h.Mode&0o7777, h.Uid, h.Gid)
		case tar.TypeReg:
			data, err := io.ReadAll(tr)
			if err != nil {
				return err
			}
			fs[name] = entry{typ: tar.TypeReg, mode: h.Mode & 0o7777, uid: h.Uid, gid: h.Gid, data: data}
		case tar.TypeSymlink:
			fs.symlink(name, h.Linkname)
		case tar.TypeLink:
			target := fs[clean(h.Linkname)]
			if target.typ != tar.TypeReg {
				return fmt.Errorf("%s: hard link %s to %s, which is not kept", file, name, h.Linkname)
			}
			fs[name] = target
		default:
			return fmt.Errorf("%s: %s has tar type %q", file, name, h.Typeflag)
		}
	}
}

// under keeps paths below any of the prefixes, and the directories leading to them.
func under(prefixes ...string) func(string) bool {
	return func(p string) bool {
		for _, pre := range prefixes {
			if p == pre || strings.HasPrefix(p, pre+"/") || strings.HasPrefix(pre, p+"/") {
				return true
			}
		}
		return false
	}
}

// not keeps what keep keeps, except paths below any of the prefixes.
func not(keep func(string) bool, prefixes ...string) func(string) bool {
	return func(p string) bool {
		for _, pre := range prefixes {
			if p == pre || strings.HasPrefix(p, pre+"/") {
				return false
			}
		}
		return keep(p)
	}
}
