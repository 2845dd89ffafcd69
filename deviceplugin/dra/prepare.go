package dra

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/deviceplugin/hookenv"
	"github.com/tessera-gpu/tessera/deviceplugin/records"
)

// ErrClaimChanged is wrapped when a claim that is already prepared comes back with a
// different allocation: its containers were set up from the first one.
var ErrClaimChanged = errors.New("claim changed since it was prepared")

// ErrOvercommit is wrapped when a claim's share does not fit beside the shares already
// prepared on its card: the scheduler's view and the node's differ, and the node refuses
// rather than give a card more than it has.
var ErrOvercommit = errors.New("card over-committed")

// claimContainer is the one "container" directory of a claim in the records store: a
// claim's limits hold for every container that uses it.
const claimContainer = "claim"

// CheckpointFile is the checkpoint's name in the driver's state directory.
const CheckpointFile = "checkpoint.json"

// CardSource is the agent's live card view (*cards.Registry).
type CardSource interface {
	Inventory() *api.NodeInventory
}

// PrepareConfig is what preparing a claim needs from the agent's configuration.
type PrepareConfig struct {
	// StateDir is the driver's own state directory (the agent's stateDir + "/dra"): the
	// checkpoint and one directory per claim, never the device plugin's pods/ directory,
	// whose GC removes what belongs to no pod.
	StateDir string
	// CDISpecDir is where the per-claim CDI specs are written (the agent's cdiSpecDir).
	CDISpecDir string
	// CardKind is the CDI kind of the NVIDIA toolkit's spec that names cards by UUID.
	CardKind string
	// Pool is this node's pool (the node's name).
	Pool string
	// Container renders the limits file and the hook library's edits.
	Container hookenv.Container
	// Pods finds the pods a claim is reserved for, to choose where its regions go
	// (ChooseRegion); nil keeps every new claim's regions in its pods' /dev/shm.
	Pods PodGetter
}

// Preparer implements kubeletplugin.DRAPlugin: it turns allocated claims into a limits
// file and a CDI spec per claim, and records what it prepared in a checkpoint.
// It is safe for concurrent use (the helper serialises calls anyway).
type Preparer struct {
	cfg     PrepareConfig
	cards   CardSource
	store   *records.Store
	path    string
	onFatal func(error)

	mu   sync.Mutex
	ckpt *Checkpoint
}

// NewPreparer creates the state directory and loads the checkpoint. A checkpoint that
// does not decode is an error: preparing over it could hand a card out twice.
func NewPreparer(cfg PrepareConfig, cs CardSource, onFatal func(error)) (*Preparer, error) {
	if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
		return nil, fmt.Errorf("create DRA state directory: %w", err)
	}
	p := &Preparer{cfg: cfg, cards: cs, onFatal: onFatal, path: filepath.Join(cfg.StateDir, CheckpointFile),
		store: &records.Store{Root: cfg.StateDir}}
	c, err := readCheckpoint(p.path)
	if err != nil {
		return nil, err
	}
	p.ckpt = c
	klog.InfoS("Loaded the DRA checkpoint", "path", p.path, "claims", len(c.Claims))
	return p, nil
}

// Prepared returns a copy of the checkpoint's claims.
func (p *Preparer) Prepared() map[string]PreparedClaim {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]PreparedClaim, len(p.ckpt.Claims))
	for uid, c := range p.ckpt.Claims {
		out[uid] = c
	}
	return out
}

// ClaimDir is the host directory holding a claim's limits file.
func (p *Preparer) ClaimDir(uid string) string { return p.store.ContainerDir(uid, claimContainer) }

// PrepareResourceClaims prepares each claim on its own: one bad claim fails alone.
func (p *Preparer) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, c := range claims {
		devs, err := p.prepare(c)
		if err != nil {
			klog.ErrorS(err, "Cannot prepare resource claim", "claim", klog.KObj(c), "uid", c.UID)
			out[c.UID] = kubeletplugin.PrepareResult{Err: err}
			continue
		}
		out[c.UID] = kubeletplugin.PrepareResult{Devices: devs}
	}
	return out, nil
}

func (p *Preparer) prepare(claim *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	uid := string(claim.UID)
	if err := validateUID(uid); err != nil {
		return nil, fmt.Errorf("%w: claim %s/%s: metadata.%v", ErrInvalidClaim, claim.Namespace, claim.Name, err)
	}
	inv := p.cards.Inventory()
	shares, err := ClaimShares(claim, p.cfg.Pool, inv.Cards)
	if err != nil {
		return nil, err
	}
	want := PreparedClaim{Namespace: claim.Namespace, Name: claim.Name}
	for _, s := range shares {
		want.Devices = append(want.Devices, PreparedDevice{Share: s, CDIDeviceIDs: CDIDeviceIDs(uid, s, p.cfg.CardKind)})
	}
	for _, c := range inv.Cards {
		for _, s := range shares {
			if c.UUID == s.UUID && !c.Healthy {
				klog.InfoS("Preparing a claim on an unhealthy card (the claim tolerates the taint or was allocated before it)",
					"claim", klog.KObj(claim), "card", c.UUID)
			}
		}
	}

	// A new claim's region is chosen before the lock: finding its pods may wait for the
	// pod informer, and the guard reads the checkpoint meanwhile.
	p.mu.Lock()
	_, known := p.ckpt.Claims[uid]
	p.mu.Unlock()
	var why string
	if !known {
		want.Region, why = ChooseRegion(claim, p.cfg.Pods)
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	if old, ok := p.ckpt.Claims[uid]; ok {
		if !sameShares(old, want) {
			return nil, fmt.Errorf("%w: claim %s/%s (uid %s) was prepared with %s, now allocates %s", ErrClaimChanged,
				claim.Namespace, claim.Name, uid, describe(old), describe(want))
		}
		// The files are written again (a cleaned /var/run loses the spec), the devices
		// are the ones returned the first time.
		if err := p.writeFiles(uid, old); err != nil {
			return nil, err
		}
		klog.V(3).InfoS("Claim already prepared", "claim", klog.KObj(claim), "uid", uid)
		return kubeletDevices(old), nil
	}
	if len(want.Devices) == 0 {
		return nil, nil
	}
	if err := p.fits(uid, want, inv.Cards); err != nil {
		return nil, fmt.Errorf("claim %s/%s: %w", claim.Namespace, claim.Name, err)
	}
	if why != "" {
		klog.InfoS("The claim's regions stay in its pods' /dev/shm, where the agent cannot read them", "claim", klog.KObj(claim),
			"uid", uid, "reason", why)
	}
	if err := p.writeFiles(uid, want); err != nil {
		p.removeFiles(uid)
		return nil, err
	}
	p.ckpt.Claims[uid] = want
	if err := writeCheckpoint(p.path, p.ckpt); err != nil {
		delete(p.ckpt.Claims, uid)
		p.removeFiles(uid)
		return nil, err
	}
	klog.InfoS("Prepared resource claim", "claim", klog.KObj(claim), "uid", uid, "shares", describe(want), "region", RegionPath(uid, want.Region))
	return kubeletDevices(want), nil
}

// fits checks each share of a new claim against the shares prepared on the same card:
// memory adds up to at most the card's, cores to at most 100. The caller holds p.mu.
func (p *Preparer) fits(uid string, c PreparedClaim, cards []api.Card) error {
	for _, d := range c.Devices {
		mem, cores := d.MemoryMiB, d.Cores
		var others []string
		for other, oc := range p.ckpt.Claims {
			for _, od := range oc.Devices {
				if od.UUID == d.UUID && other != uid {
					mem += od.MemoryMiB
					cores += od.Cores
					others = append(others, oc.Namespace+"/"+oc.Name)
				}
			}
		}
		var total int64
		for _, card := range cards {
			if card.UUID == d.UUID {
				total = card.MemoryMiB
			}
		}
		if mem > total || cores > MaxCores {
			slices.Sort(others)
			return fmt.Errorf("%w: %s (%s) would hold %d of %d MiB and %d of %d cores with the claims already prepared there (%s)",
				ErrOvercommit, d.Device, d.UUID, mem, total, cores, MaxCores, strings.Join(others, ", "))
		}
	}
	return nil
}

func (p *Preparer) writeFiles(uid string, c PreparedClaim) error {
	limits := p.cfg.Container.LimitsFile(limitsRecord(uid, c))
	if err := p.store.WriteLimits(uid, claimContainer, limits); err != nil {
		return fmt.Errorf("claim %s/%s: %w", c.Namespace, c.Name, err)
	}
	shares := make([]Share, len(c.Devices))
	for i, d := range c.Devices {
		shares[i] = d.Share
	}
	return writeClaimSpec(p.cfg.CDISpecDir, uid, ClaimSpec(uid, shares, &p.cfg.Container, limits, p.ClaimDir(uid)))
}

// removeFiles deletes a claim's spec and directory, logging what it cannot.
func (p *Preparer) removeFiles(uid string) []error {
	var errs []error
	if err := removeClaimSpec(p.cfg.CDISpecDir, uid); err != nil {
		errs = append(errs, err)
	}
	if err := p.store.RemovePod(uid); err != nil {
		errs = append(errs, err)
	}
	for _, err := range errs {
		klog.ErrorS(err, "Cannot remove a claim's files", "uid", uid)
	}
	return errs
}

// UnprepareResourceClaims removes each claim's files and checkpoint entry. A claim the
// checkpoint does not know is not an error (the kubelet repeats calls); its files, if an
// interrupted prepare left any, are removed too.
func (p *Preparer) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range claims {
		uid := string(c.UID)
		if err := validateUID(uid); err != nil {
			out[c.UID] = fmt.Errorf("%w: claim %s: %v", ErrInvalidClaim, c.NamespacedName, err)
			continue
		}
		if errs := p.removeFiles(uid); len(errs) > 0 {
			out[c.UID] = errors.Join(errs...)
			continue
		}
		old, known := p.ckpt.Claims[uid]
		if known {
			delete(p.ckpt.Claims, uid)
			if err := writeCheckpoint(p.path, p.ckpt); err != nil {
				p.ckpt.Claims[uid] = old
				out[c.UID] = err
				continue
			}
		}
		out[c.UID] = nil
		klog.InfoS("Unprepared resource claim", "claim", c.NamespacedName, "uid", uid, "known", known)
	}
	return out, nil
}

// HandleError logs errors of the helper's background work (publishing slices, the gRPC
// servers). A recoverable one is retried by the helper; any other stops the driver.
func (p *Preparer) HandleError(ctx context.Context, err error, msg string) {
	klog.ErrorS(err, msg, "driver", DriverName)
	if !errors.Is(err, kubeletplugin.ErrRecoverable) && p.onFatal != nil {
		p.onFatal(fmt.Errorf("%s: %w", msg, err))
	}
}

func kubeletDevices(c PreparedClaim) []kubeletplugin.Device {
	out := make([]kubeletplugin.Device, len(c.Devices))
	for i, d := range c.Devices {
		out[i] = kubeletplugin.Device{Requests: []string{d.Request}, PoolName: d.Pool, DeviceName: d.Device,
			CDIDeviceIDs: slices.Clone(d.CDIDeviceIDs)}
	}
	return out
}

func sameShares(a, b PreparedClaim) bool {
	return slices.EqualFunc(a.Devices, b.Devices, func(x, y PreparedDevice) bool { return x.Share == y.Share })
}

// describe lists a claim's shares for logs and errors: "card-0=4096MiB/30%".
func describe(c PreparedClaim) string {
	s := ""
	for i, d := range c.Devices {
		if i > 0 {
			s += ","
		}
		s += fmt.Sprintf("%s=%dMiB/%d%%", d.Device, d.MemoryMiB, d.Cores)
	}
	if s == "" {
		return "no devices of " + DriverName
	}
	return s
}

var _ kubeletplugin.DRAPlugin = (*Preparer)(nil)
