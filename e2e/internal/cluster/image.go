package cluster

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// Image is an image's root file system unpacked from an archive `make images` wrote (a
// docker-save manifest.json beside an OCI layout), with how it runs.
type Image struct {
	Root       string
	Entrypoint []string
	User       string // uid:gid
	Labels     map[string]string
}

// UnpackImage unpacks the archive's layers, in order, into dir. It reads the archive with
// the standard library only, as `docker load` reads the manifest: the first image's
// config and layers (gzip or plain tar).
func UnpackImage(archive, dir string) (*Image, error) {
	blobs, err := readTar(archive)
	if err != nil {
		return nil, err
	}
	var manifest []struct {
		Config string
		Layers []string
	}
	if err := json.Unmarshal(blobs["manifest.json"], &manifest); err != nil || len(manifest) == 0 {
		return nil, fmt.Errorf("%s: manifest.json: %v (%d images)", archive, err, len(manifest))
	}
	var cfg struct {
		Config struct {
			Entrypoint []string
			User       string
			Labels     map[string]string
		} `json:"config"`
	}
	if err := json.Unmarshal(blobs[manifest[0].Config], &cfg); err != nil {
		return nil, fmt.Errorf("%s: config %s: %w", archive, manifest[0].Config, err)
	}
	for _, l := range manifest[0].Layers {
		b, ok := blobs[l]
		if !ok {
			return nil, fmt.Errorf("%s: layer %s is not in the archive", archive, l)
		}
		if err := unpackLayer(b, dir); err != nil {
			return nil, fmt.Errorf("%s: layer %s: %w", archive, l, err)
		}
	}
	return &Image{Root: dir, Entrypoint: cfg.Config.Entrypoint, User: cfg.Config.User, Labels: cfg.Config.Labels}, nil
}

func readTar(file string) (map[string][]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if h.Typeflag == tar.TypeReg {
			if out[path.Clean(h.Name)], err = io.ReadAll(tr); err != nil {
				return nil, err
			}
		}
	}
}

// unpackLayer writes a layer's directories, files and symlinks under dir with their modes
// and owners; entries that would leave dir are refused.
func unpackLayer(layer []byte, dir string) error {
	var r io.Reader = bytes.NewReader(layer)
	if len(layer) > 2 && layer[0] == 0x1f && layer[1] == 0x8b {
		zr, err := gzip.NewReader(r)
		if err != nil {
			return err
		}
		r = zr
	}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := path.Clean("/" + h.Name)
		if strings.HasPrefix(path.Base(name), ".wh.") {
			return fmt.Errorf("whiteout %s: not expected in Tessera's images", h.Name)
		}
		target := filepath.Join(dir, filepath.FromSlash(name))
		mode := os.FileMode(h.Mode).Perm()
		if h.Mode&0o1000 != 0 {
			mode |= os.ModeSticky
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			if err := os.Symlink(h.Linkname, target); err != nil {
				return err
			}
			continue
		default:
			return fmt.Errorf("%s: entry type %q not expected in Tessera's images", h.Name, h.Typeflag)
		}
		if err := os.Chown(target, h.Uid, h.Gid); err != nil {
			return err
		}
		if err := os.Chmod(target, mode); err != nil {
			return err
		}
	}
}

// RunSchedulerFromImage replaces the scheduler with the one in img's root file system, run
// as the image says (chroot into it, as the image's user), with its kubeconfig and conf
// copied into the root file system; nil goes back to the scheduler built for the run.
func (c *Cluster) RunSchedulerFromImage(ctx context.Context, img *Image) error {
	c.mu.Lock()
	p := c.sched
	c.schedImage = img
	c.mu.Unlock()
	if p != nil {
		p.stop(podGrace)
	}
	return c.StartScheduler(ctx)
}

// schedulerCommand is the program and leading arguments that start the scheduler, and the
// paths it reads the kubeconfig and conf from.
func (c *Cluster) schedulerCommand(conf string) (prog string, lead []string, kubeconfig, confPath string, err error) {
	c.mu.Lock()
	img := c.schedImage
	c.mu.Unlock()
	if img == nil {
		return c.Opts.Bin.Scheduler, nil, c.schedKubeconfig, conf, nil
	}
	if len(img.Entrypoint) == 0 || img.User == "" {
		return "", nil, "", "", fmt.Errorf("image at %s: entrypoint %v, user %q", img.Root, img.Entrypoint, img.User)
	}
	// Where a pod would mount its ConfigMap and Secret: inside the image's root.
	inside := "/etc/tessera-e2e"
	if err := os.MkdirAll(filepath.Join(img.Root, inside), 0o755); err != nil {
		return "", nil, "", "", err
	}
	for src, dst := range map[string]string{c.schedKubeconfig: "kubeconfig", conf: "volcano-scheduler.conf"} {
		b, err := os.ReadFile(src)
		if err != nil {
			return "", nil, "", "", err
		}
		if err := os.WriteFile(filepath.Join(img.Root, inside, dst), b, 0o644); err != nil {
			return "", nil, "", "", err
		}
	}
	lead = append([]string{"--userspec=" + img.User, img.Root}, img.Entrypoint...)
	return "chroot", lead, inside + "/kubeconfig", inside + "/volcano-scheduler.conf", nil
}

// SchedulerPID is the running scheduler's process id (0 if none).
func (c *Cluster) SchedulerPID() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sched == nil {
		return 0
	}
	if done, _ := c.sched.exited(); done {
		return 0
	}
	return c.sched.cmd.Process.Pid
}
