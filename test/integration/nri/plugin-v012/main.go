// A real NRI plugin built on containerd/nri v0.12.3's stub, for test/integration/nri/v012.test.ts.
// It logs every event it gets as one JSON line, and adjusts containers as their pod's annotations ask:
//
//	nri.stove.test/args.container.<name>    a JSON array: the container's new args (SetArgs)
//	nri.stove.test/sysctl.container.<name>  "key=value": a sysctl (SetLinuxSysctl)
//	nri.stove.test/rlimit.container.<name>  "type=soft:hard", e.g. "RLIMIT_NOFILE=1000:2000" (AddRlimit)
//	nri.stove.test/netns.container.<name>   a path: the container's network namespace (AddOrReplaceNamespace)
//	nri.stove.test/hook.container.<name>    a path: a prestart OCI hook running it (AddHooks)
//	nri.stove.test/seccomp.container.<name> a default action, e.g. "SCMP_ACT_ALLOW": the seccomp filter (SetLinuxSeccompPolicy)
//	nri.stove.test/ioprio.container.<name>  "class:level", e.g. "IOPRIO_CLASS_BE:6" (SetLinuxIOPriority)
//	nri.stove.test/sched.container.<name>   "policy:nice:priority", e.g. "SCHED_BATCH:7:0" (SetLinuxScheduler)
//	nri.stove.test/netdev.container.<name>  "host=name,…": host interfaces moved in; "-host" removes one (AddLinuxNetDevice)
//	nri.stove.test/rdt.container.<name>     JSON {"class": "c", "closId": "x", "schemata": ["L3:0=f"], "enableMonitoring": true} (SetLinuxRDT…)
//
// With -validator it is a validator only: it rejects every adjustment that sets a sysctl, naming the
// plugin that set it (from the field owners the runtime sends). With -default-validator it is NRI's own
// default validator (the one containerd and CRI-O build in), configured by its Configure config (YAML,
// the keys of DefaultValidatorConfig).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	validator "github.com/containerd/nri/plugins/default-validator"
	yaml "go.yaml.in/yaml/v3"
)

type logger struct {
	mu  sync.Mutex
	out *os.File
}

func (l *logger) line(v map[string]any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, _ := json.Marshal(v)
	_, _ = l.out.Write(append(b, '\n'))
}

type plugin struct {
	log     *logger
	name    string
	failPod bool
}

func (p *plugin) pod(event string, pod *api.PodSandbox, extra map[string]any) {
	v := map[string]any{"plugin": p.name, "event": event, "pod": pod.GetId()}
	for k, x := range extra {
		v[k] = x
	}
	p.log.line(v)
}

func (p *plugin) ctr(event string, pod *api.PodSandbox, c *api.Container) {
	p.log.line(map[string]any{
		"plugin": p.name, "event": event, "pod": pod.GetId(), "container": c.GetId(), "name": c.GetName(),
		"state": c.GetState().String(), "args": c.GetArgs(), "uid": c.GetUser().GetUid(), "gid": c.GetUser().GetGid(),
		"image": c.GetImage().GetName(), "createdAt": c.GetCreatedAt(), "startedAt": c.GetStartedAt(),
		"finishedAt": c.GetFinishedAt(), "exitCode": c.GetExitCode(), "sysctl": c.GetLinux().GetSysctl(),
		"seccompSyscalls": len(c.GetLinux().GetSeccompPolicy().GetSyscalls()), "seccompProfile": c.GetLinux().GetSeccompProfile().GetProfileType().String(),
		"ioPriority": ioprioString(c.GetLinux().GetIoPriority()), "scheduler": schedString(c.GetLinux().GetScheduler()),
		"netDevices": netDeviceNames(c.GetLinux().GetNetDevices()),
	})
}

func ioprioString(p *api.LinuxIOPriority) string {
	if p == nil {
		return ""
	}
	return fmt.Sprintf("%s:%d", p.GetClass().String(), p.GetPriority())
}

func schedString(s *api.LinuxScheduler) string {
	if s == nil {
		return ""
	}
	return fmt.Sprintf("%s:%d:%d", s.GetPolicy().String(), s.GetNice(), s.GetPriority())
}

func netDeviceNames(m map[string]*api.LinuxNetDevice) map[string]string {
	out := map[string]string{}
	for host, d := range m {
		out[host] = d.GetName()
	}
	return out
}

func (p *plugin) Configure(_ context.Context, config, runtime, version string) (stub.EventMask, error) {
	p.log.line(map[string]any{"plugin": p.name, "event": "Configure", "runtime": runtime, "version": version, "config": config})
	return 0, nil // 0: the events of the methods this type has
}

func (p *plugin) Synchronize(_ context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	p.log.line(map[string]any{"plugin": p.name, "event": "Synchronize", "pods": len(pods), "containers": len(ctrs)})
	return nil, nil
}

func (p *plugin) RunPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	p.pod("RunPodSandbox", pod, nil)
	return nil
}

func (p *plugin) UpdatePodSandbox(_ context.Context, pod *api.PodSandbox, overhead, res *api.LinuxResources) error {
	p.pod("UpdatePodSandbox", pod, map[string]any{"memoryLimit": res.GetMemory().GetLimit().GetValue(), "cpuShares": res.GetCpu().GetShares().GetValue()})
	if p.failPod {
		return errors.New("pod resizing is refused by this plugin")
	}
	return nil
}

func (p *plugin) PostUpdatePodSandbox(_ context.Context, pod *api.PodSandbox) error {
	p.pod("PostUpdatePodSandbox", pod, nil)
	return nil
}

func (p *plugin) StopPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	p.pod("StopPodSandbox", pod, nil)
	return nil
}

func (p *plugin) RemovePodSandbox(_ context.Context, pod *api.PodSandbox) error {
	p.pod("RemovePodSandbox", pod, nil)
	return nil
}

func (p *plugin) CreateContainer(_ context.Context, pod *api.PodSandbox, c *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	p.ctr("CreateContainer", pod, c)
	adjust := &api.ContainerAdjustment{}
	adjust.AddEnv("NRI_V012_PLUGIN", p.name)
	ann := pod.GetAnnotations()
	suffix := ".container." + c.GetName()
	if v, ok := ann["nri.stove.test/args"+suffix]; ok {
		var args []string
		if err := json.Unmarshal([]byte(v), &args); err != nil {
			return nil, nil, fmt.Errorf("bad args annotation: %w", err)
		}
		adjust.SetArgs(args)
	}
	if v, ok := ann["nri.stove.test/sysctl"+suffix]; ok {
		k, val, _ := strings.Cut(v, "=")
		adjust.SetLinuxSysctl(k, val)
	}
	if v, ok := ann["nri.stove.test/netns"+suffix]; ok {
		adjust.AddOrReplaceNamespace(&api.LinuxNamespace{Type: "network", Path: v})
	}
	if v, ok := ann["nri.stove.test/hook"+suffix]; ok {
		adjust.AddHooks(&api.Hooks{Prestart: []*api.Hook{{Path: v}}})
	}
	if v, ok := ann["nri.stove.test/seccomp"+suffix]; ok {
		adjust.SetLinuxSeccompPolicy(&api.LinuxSeccomp{DefaultAction: v})
	}
	if v, ok := ann["nri.stove.test/ioprio"+suffix]; ok {
		class, level, _ := strings.Cut(v, ":")
		n, err := strconv.ParseInt(level, 10, 32)
		if err != nil {
			return nil, nil, fmt.Errorf("bad ioprio annotation %q", v)
		}
		adjust.SetLinuxIOPriority(&api.LinuxIOPriority{Class: api.IOPrioClass(api.IOPrioClass_value[class]), Priority: int32(n)})
	}
	if v, ok := ann["nri.stove.test/sched"+suffix]; ok {
		parts := strings.Split(v, ":")
		if len(parts) != 3 {
			return nil, nil, fmt.Errorf("bad sched annotation %q", v)
		}
		nice, err1 := strconv.ParseInt(parts[1], 10, 32)
		prio, err2 := strconv.ParseInt(parts[2], 10, 32)
		if err1 != nil || err2 != nil {
			return nil, nil, fmt.Errorf("bad sched annotation %q", v)
		}
		adjust.SetLinuxScheduler(&api.LinuxScheduler{Policy: api.LinuxSchedulerPolicy(api.LinuxSchedulerPolicy_value[parts[0]]), Nice: int32(nice), Priority: int32(prio)})
	}
	if v, ok := ann["nri.stove.test/netdev"+suffix]; ok {
		for _, entry := range strings.Split(v, ",") {
			if host, removed := strings.CutPrefix(entry, "-"); removed {
				adjust.RemoveLinuxNetDevice(host)
				continue
			}
			host, name, _ := strings.Cut(entry, "=")
			adjust.AddLinuxNetDevice(host, &api.LinuxNetDevice{Name: name})
		}
	}
	if v, ok := ann["nri.stove.test/rdt"+suffix]; ok {
		var rdt struct {
			Class            *string  `json:"class"`
			ClosID           *string  `json:"closId"`
			Schemata         []string `json:"schemata"`
			EnableMonitoring *bool    `json:"enableMonitoring"`
		}
		if err := json.Unmarshal([]byte(v), &rdt); err != nil {
			return nil, nil, fmt.Errorf("bad rdt annotation: %w", err)
		}
		if rdt.Class != nil {
			adjust.SetLinuxRDTClass(*rdt.Class)
		}
		if rdt.ClosID != nil {
			adjust.SetLinuxRDTClosID(*rdt.ClosID)
		}
		if rdt.Schemata != nil {
			adjust.SetLinuxRDTSchemata(rdt.Schemata)
		}
		if rdt.EnableMonitoring != nil {
			adjust.SetLinuxRDTEnableMonitoring(*rdt.EnableMonitoring)
		}
	}
	if v, ok := ann["nri.stove.test/rlimit"+suffix]; ok {
		typ, limits, _ := strings.Cut(v, "=")
		soft, hard, _ := strings.Cut(limits, ":")
		s, err1 := strconv.ParseUint(soft, 10, 64)
		h, err2 := strconv.ParseUint(hard, 10, 64)
		if err1 != nil || err2 != nil {
			return nil, nil, fmt.Errorf("bad rlimit annotation %q", v)
		}
		adjust.AddRlimit(typ, h, s)
	}
	return adjust, nil, nil
}

func (p *plugin) PostCreateContainer(_ context.Context, pod *api.PodSandbox, c *api.Container) error {
	p.ctr("PostCreateContainer", pod, c)
	return nil
}

func (p *plugin) StartContainer(_ context.Context, pod *api.PodSandbox, c *api.Container) error {
	p.ctr("StartContainer", pod, c)
	return nil
}

func (p *plugin) PostStartContainer(_ context.Context, pod *api.PodSandbox, c *api.Container) error {
	p.ctr("PostStartContainer", pod, c)
	return nil
}

func (p *plugin) StopContainer(_ context.Context, pod *api.PodSandbox, c *api.Container) ([]*api.ContainerUpdate, error) {
	p.ctr("StopContainer", pod, c)
	return nil, nil
}

func (p *plugin) RemoveContainer(_ context.Context, pod *api.PodSandbox, c *api.Container) error {
	p.ctr("RemoveContainer", pod, c)
	return nil
}

type sysctlValidator struct {
	log  *logger
	name string
}

func (v *sysctlValidator) Configure(_ context.Context, config, runtime, version string) (stub.EventMask, error) {
	return 0, nil
}

func (v *sysctlValidator) ValidateContainerAdjustment(_ context.Context, req *api.ValidateContainerAdjustmentRequest) error {
	plugins := []string{}
	for _, p := range req.GetPlugins() {
		plugins = append(plugins, p.GetIndex()+"-"+p.GetName())
	}
	v.log.line(map[string]any{"plugin": v.name, "event": "ValidateContainerAdjustment", "container": req.GetContainer().GetName(), "plugins": plugins})
	sysctl := req.GetAdjust().GetLinux().GetSysctl()
	if len(sysctl) == 0 {
		return nil
	}
	owners := []string{}
	for key := range sysctl {
		owner, _ := req.GetOwners().SysctlOwner(req.GetContainer().GetId(), key)
		owners = append(owners, key+" by "+owner)
	}
	return fmt.Errorf("sysctl adjustments are not allowed here (%s)", strings.Join(owners, ", "))
}

type defaultValidator struct {
	*validator.DefaultValidator
}

func (d *defaultValidator) Configure(_ context.Context, config, runtime, version string) (stub.EventMask, error) {
	cfg := &validator.DefaultValidatorConfig{}
	if err := yaml.Unmarshal([]byte(config), cfg); err != nil {
		return 0, fmt.Errorf("bad default validator config: %w", err)
	}
	d.SetConfig(cfg)
	return 0, nil
}

func main() {
	name := flag.String("name", "", "plugin name (registration)")
	idx := flag.String("idx", "", "plugin index (registration)")
	socket := flag.String("socket", "", "runtime socket (external plugins)")
	logPath := flag.String("log", "", "file to append the JSON lines to")
	failPod := flag.Bool("fail-pod-update", false, "answer UpdatePodSandbox with an error")
	asValidator := flag.Bool("validator", false, "be a validator that rejects sysctl adjustments")
	asDefault := flag.Bool("default-validator", false, "be NRI's default validator")
	flag.Parse()
	out := os.Stdout
	if *logPath != "" {
		f, err := os.OpenFile(*logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		out = f
	}
	l := &logger{out: out}
	opts := []stub.Option{}
	if *name != "" {
		opts = append(opts, stub.WithPluginName(*name))
	}
	if *idx != "" {
		opts = append(opts, stub.WithPluginIdx(*idx))
	}
	if *socket != "" {
		opts = append(opts, stub.WithSocketPath(*socket))
	}
	label := *name
	if label == "" {
		label = os.Getenv("NRI_PLUGIN_NAME")
	}
	var impl any = &plugin{log: l, name: label, failPod: *failPod}
	if *asValidator {
		impl = &sysctlValidator{log: l, name: label}
	}
	if *asDefault {
		impl = &defaultValidator{validator.NewDefaultValidator(&validator.DefaultValidatorConfig{})}
	}
	s, err := stub.New(impl, opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cannot create the plugin stub:", err)
		os.Exit(1)
	}
	if err := s.Run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "plugin exited:", err)
		os.Exit(1)
	}
}
