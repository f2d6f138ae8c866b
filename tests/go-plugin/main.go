// gofork: a small Nomad external task driver plugin, written the way Nomad's external plugins
// are (Nomad's plugins.Serve is go-plugin's plugin.Serve with Nomad's handshake and a "driver"
// gRPC plugin serving the BasePlugin and Driver services). It forks the task's command with the
// task's environment, its output going to the paths the agent gives (Nomad's log FIFOs).
//
// Built by build.sh against Debian's go-plugin, gRPC and go-msgpack; the protocol's Go code is
// generated at build time from abi/drover-plugin-proto/proto. Drover's e2e tests use it to show
// that a Go plugin built on HashiCorp's own go-plugin library works with Drover's agent.
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/ioutil"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/golang/protobuf/ptypes"
	hclog "github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-msgpack/codec"
	plugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	base "gofork/pb/base"
	drivers "gofork/pb/drivers"
	hclspec "gofork/pb/hclspec"
	structs "gofork/pb/structs"
)

const (
	pluginName    = "gofork"
	pluginVersion = "0.1.0"
	// Nomad's base.Handshake.
	magicCookieKey   = "NOMAD_PLUGIN_MAGIC_COOKIE"
	magicCookieValue = "e4327c2e01eabfd75a8a67adb114fb34a757d57eee7728d857a8cec6e91a7255"
	// The layout of driverState in a TaskHandle.
	handleVersion = 1
)

// Nomad's error text for an unknown task id (drivers.ErrTaskNotFound).
var errTaskNotFound = status.Error(codes.NotFound, "task not found for given id")

// msgpackHandle is Nomad's base.MsgpackHandle (go-msgpack 0.5.x era), which base.MsgPackDecode
// decodes plugin and task config with.
var msgpackHandle = func() *codec.MsgpackHandle {
	h := &codec.MsgpackHandle{RawToString: true}
	h.MapType = reflect.TypeOf(map[string]interface{}(nil))
	return h
}()

func msgPackDecode(buf []byte, out interface{}) error {
	return codec.NewDecoder(bytes.NewReader(buf), msgpackHandle).Decode(out)
}

func msgPackEncode(in interface{}) ([]byte, error) {
	var buf bytes.Buffer
	err := codec.NewEncoder(&buf, msgpackHandle).Encode(in)
	return buf.Bytes(), err
}

// The HCL schemas, as Nomad's hclspec helpers build them.
func attr(name, typ string, required bool) *hclspec.Spec {
	return &hclspec.Spec{Block: &hclspec.Spec_Attr{Attr: &hclspec.Attr{Name: name, Type: typ, Required: required}}}
}

func object(attrs map[string]*hclspec.Spec) *hclspec.Spec {
	return &hclspec.Spec{Block: &hclspec.Spec_Object{Object: &hclspec.Object{Attributes: attrs}}}
}

var configSpec = object(map[string]*hclspec.Spec{
	"enabled": {Block: &hclspec.Spec_Default{Default: &hclspec.Default{
		Primary: attr("enabled", "bool", false),
		Default: &hclspec.Spec{Block: &hclspec.Spec_Literal{Literal: &hclspec.Literal{Value: "false"}}},
	}}},
})

var taskConfigSpec = object(map[string]*hclspec.Spec{
	"command": attr("command", "string", true),
	"args":    attr("args", "list(string)", false),
})

type pluginConfig struct {
	Enabled bool `codec:"enabled"`
}

type taskConfig struct {
	Command string   `codec:"command"`
	Args    []string `codec:"args"`
}

// driverState is what a TaskHandle carries to recover a task in a restarted plugin.
type driverState struct {
	Pid        int
	StartTicks uint64
	StartedAt  int64
}

// task is one running (or exited) task.
type task struct {
	config    *drivers.TaskConfig
	state     driverState
	startedAt time.Time
	done      chan struct{} // closed once the process exited; result and completedAt are set
	result    drivers.ExitResult
	completed time.Time
}

type driver struct {
	drivers.UnimplementedDriverServer
	base.UnimplementedBasePluginServer
	logger hclog.Logger

	mu      sync.Mutex
	enabled bool
	tasks   map[string]*task
	// The open TaskEvents streams.
	listeners map[chan *drivers.DriverTaskEvent]struct{}
}

// emit hands a task event to every TaskEvents stream, dropping it for a stream that lags.
func (d *driver) emit(cfg *drivers.TaskConfig, message string) {
	event := &drivers.DriverTaskEvent{TaskId: cfg.Id, AllocId: cfg.AllocId, TaskName: cfg.Name, Timestamp: ptypes.TimestampNow(), Message: message}
	d.mu.Lock()
	defer d.mu.Unlock()
	for ch := range d.listeners {
		select {
		case ch <- event:
		default:
		}
	}
}

// BasePlugin service.

func (d *driver) PluginInfo(context.Context, *base.PluginInfoRequest) (*base.PluginInfoResponse, error) {
	return &base.PluginInfoResponse{
		Type:              base.PluginType_DRIVER,
		PluginApiVersions: []string{"v0.1.0"},
		PluginVersion:     pluginVersion,
		Name:              pluginName,
	}, nil
}

func (d *driver) ConfigSchema(context.Context, *base.ConfigSchemaRequest) (*base.ConfigSchemaResponse, error) {
	return &base.ConfigSchemaResponse{Spec: configSpec}, nil
}

func (d *driver) SetConfig(_ context.Context, req *base.SetConfigRequest) (*base.SetConfigResponse, error) {
	var c pluginConfig
	if len(req.MsgpackConfig) != 0 {
		if err := msgPackDecode(req.MsgpackConfig, &c); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "decoding plugin config: %v", err)
		}
	}
	d.logger.Info("plugin configured", "enabled", c.Enabled, "api_version", req.PluginApiVersion)
	d.mu.Lock()
	d.enabled = c.Enabled
	d.mu.Unlock()
	return &base.SetConfigResponse{}, nil
}

// Driver service.

func (d *driver) TaskConfigSchema(context.Context, *drivers.TaskConfigSchemaRequest) (*drivers.TaskConfigSchemaResponse, error) {
	return &drivers.TaskConfigSchemaResponse{Spec: taskConfigSpec}, nil
}

func (d *driver) Capabilities(context.Context, *drivers.CapabilitiesRequest) (*drivers.CapabilitiesResponse, error) {
	return &drivers.CapabilitiesResponse{Capabilities: &drivers.DriverCapabilities{
		SendSignals: true,
		FsIsolation: drivers.DriverCapabilities_NONE,
	}}, nil
}

func (d *driver) fingerprint() *drivers.FingerprintResponse {
	d.mu.Lock()
	enabled := d.enabled
	d.mu.Unlock()
	if !enabled {
		return &drivers.FingerprintResponse{Health: drivers.FingerprintResponse_UNDETECTED, HealthDescription: "disabled"}
	}
	return &drivers.FingerprintResponse{
		Health:            drivers.FingerprintResponse_HEALTHY,
		HealthDescription: "Healthy",
		Attributes: map[string]*structs.Attribute{
			// As Nomad's drivers do: the client shows it as `driver.gofork = 1`.
			"driver.gofork":         {Value: &structs.Attribute_BoolVal{BoolVal: true}},
			"driver.gofork.version": {Value: &structs.Attribute_StringVal{StringVal: pluginVersion}},
		},
	}
}

// Fingerprint answers at once, then again every 30 s, as Nomad's drivers do.
func (d *driver) Fingerprint(_ *drivers.FingerprintRequest, stream drivers.Driver_FingerprintServer) error {
	ticker := time.NewTicker(30 * time.Second)
	defer ticker.Stop()
	for {
		if err := stream.Send(d.fingerprint()); err != nil {
			return err
		}
		select {
		case <-stream.Context().Done():
			return nil
		case <-ticker.C:
		}
	}
}

func (d *driver) get(id string) (*task, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	t, ok := d.tasks[id]
	if !ok {
		return nil, errTaskNotFound
	}
	return t, nil
}

// openWriter opens a log FIFO for writing without blocking when nobody reads it.
func openWriter(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	// Fd() puts the descriptor back into blocking mode, which the task wants.
	f.Fd()
	return f, nil
}

func (d *driver) StartTask(_ context.Context, req *drivers.StartTaskRequest) (*drivers.StartTaskResponse, error) {
	cfg := req.Task
	if cfg == nil {
		return nil, status.Error(codes.InvalidArgument, "no task config")
	}
	if _, err := d.get(cfg.Id); err == nil {
		return nil, status.Errorf(codes.AlreadyExists, "task with ID %q already started", cfg.Id)
	}
	var tc taskConfig
	if err := msgPackDecode(cfg.MsgpackDriverConfig, &tc); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "failed to decode driver config: %v", err)
	}
	// Nomad's TaskConfig.TaskDir(): the task's directory is alloc_dir/name.
	taskDir := filepath.Join(cfg.AllocDir, cfg.Name)
	command := tc.Command
	if strings.Contains(command, "/") && !filepath.IsAbs(command) {
		command = filepath.Join(taskDir, command)
	}
	cmd := exec.Command(command, tc.Args...)
	// Nomad's executor runs the resolved path as argv[0].
	cmd.Args[0] = cmd.Path
	cmd.Dir = taskDir
	if _, err := os.Stat(taskDir); err != nil {
		cmd.Dir = cfg.AllocDir
	}
	for k, v := range cfg.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	// Its own process group: the task outlives this plugin, and stop signals reach its children.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := openWriter(cfg.StdoutPath)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "failed to open stdout: %v", err)
	}
	defer stdout.Close()
	stderr, err := openWriter(cfg.StderrPath)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "failed to open stderr: %v", err)
	}
	defer stderr.Close()
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		return nil, status.Errorf(codes.Unknown, "failed to start command: %v", err)
	}
	t := &task{
		config:    cfg,
		state:     driverState{Pid: cmd.Process.Pid, StartTicks: startTicks(cmd.Process.Pid)},
		startedAt: time.Now(),
		done:      make(chan struct{}),
	}
	t.state.StartedAt = t.startedAt.UnixNano()
	go func() {
		err := cmd.Wait()
		t.finish(exitResult(cmd.ProcessState, err))
	}()
	d.mu.Lock()
	d.tasks[cfg.Id] = t
	d.mu.Unlock()
	d.logger.Info("started task", "task_id", cfg.Id, "command", command, "pid", t.state.Pid)
	d.emit(cfg, fmt.Sprintf("gofork started pid %d", t.state.Pid))

	state, err := msgPackEncode(&t.state)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "encoding driver state: %v", err)
	}
	return &drivers.StartTaskResponse{
		Result: drivers.StartTaskResponse_SUCCESS,
		Handle: &drivers.TaskHandle{Version: handleVersion, Config: cfg, State: drivers.TaskState_RUNNING, DriverState: state},
	}, nil
}

func (t *task) finish(r drivers.ExitResult) {
	t.result = r
	t.completed = time.Now()
	close(t.done)
}

func exitResult(ps *os.ProcessState, err error) drivers.ExitResult {
	if ps == nil {
		return drivers.ExitResult{ExitCode: -1}
	}
	ws, ok := ps.Sys().(syscall.WaitStatus)
	if ok && ws.Signaled() {
		return drivers.ExitResult{ExitCode: 128 + int32(ws.Signal()), Signal: int32(ws.Signal())}
	}
	return drivers.ExitResult{ExitCode: int32(ps.ExitCode())}
}

// startTicks is when process pid started (field 22 of /proc/PID/stat): with the pid it names
// one process for good. 0 when the process is gone or a zombie.
func startTicks(pid int) uint64 {
	data, err := ioutil.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	text := string(data)
	fields := strings.Fields(text[strings.LastIndex(text, ")")+1:])
	if len(fields) < 20 || fields[0] == "Z" {
		return 0
	}
	ticks, _ := strconv.ParseUint(fields[19], 10, 64)
	return ticks
}

func (s driverState) alive() bool {
	return s.StartTicks != 0 && startTicks(s.Pid) == s.StartTicks
}

func (d *driver) RecoverTask(_ context.Context, req *drivers.RecoverTaskRequest) (*drivers.RecoverTaskResponse, error) {
	if req.Handle == nil || req.Handle.Config == nil {
		return nil, status.Error(codes.InvalidArgument, "handle cannot be nil")
	}
	if _, err := d.get(req.TaskId); err == nil {
		return &drivers.RecoverTaskResponse{}, nil
	}
	if req.Handle.Version != handleVersion {
		return nil, status.Errorf(codes.InvalidArgument, "unknown handle version %d", req.Handle.Version)
	}
	var state driverState
	if err := msgPackDecode(req.Handle.DriverState, &state); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "failed to decode task state from handle: %v", err)
	}
	if !state.alive() {
		return nil, status.Errorf(codes.Unknown, "failed to reattach: process %d is gone", state.Pid)
	}
	t := &task{config: req.Handle.Config, state: state, startedAt: time.Unix(0, state.StartedAt), done: make(chan struct{})}
	// Not our child any more: watch the pid. Its exit status cannot be known.
	go func() {
		for state.alive() {
			time.Sleep(250 * time.Millisecond)
		}
		t.finish(drivers.ExitResult{})
	}()
	d.mu.Lock()
	d.tasks[req.TaskId] = t
	d.mu.Unlock()
	d.logger.Info("recovered task", "task_id", req.TaskId, "pid", state.Pid)
	return &drivers.RecoverTaskResponse{}, nil
}

func (d *driver) WaitTask(ctx context.Context, req *drivers.WaitTaskRequest) (*drivers.WaitTaskResponse, error) {
	t, err := d.get(req.TaskId)
	if err != nil {
		return nil, err
	}
	select {
	case <-t.done:
		r := t.result
		return &drivers.WaitTaskResponse{Result: &r}, nil
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

func parseSignal(name string) (syscall.Signal, error) {
	signals := map[string]syscall.Signal{
		"SIGHUP": syscall.SIGHUP, "SIGINT": syscall.SIGINT, "SIGQUIT": syscall.SIGQUIT,
		"SIGKILL": syscall.SIGKILL, "SIGUSR1": syscall.SIGUSR1, "SIGUSR2": syscall.SIGUSR2,
		"SIGTERM": syscall.SIGTERM, "SIGCONT": syscall.SIGCONT, "SIGSTOP": syscall.SIGSTOP,
	}
	name = strings.ToUpper(name)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	if s, ok := signals[name]; ok {
		return s, nil
	}
	return 0, fmt.Errorf("unknown signal %q", name)
}

// signal sends sig to the task's process group, if the task's process still is the one started.
func (t *task) signal(sig syscall.Signal) error {
	select {
	case <-t.done:
		return nil
	default:
	}
	return syscall.Kill(-t.state.Pid, sig)
}

// StopTask sends the signal (Nomad's executor defaults to SIGINT), then SIGKILL after timeout.
func (d *driver) StopTask(ctx context.Context, req *drivers.StopTaskRequest) (*drivers.StopTaskResponse, error) {
	t, err := d.get(req.TaskId)
	if err != nil {
		return nil, err
	}
	name := req.Signal
	if name == "" {
		name = "SIGINT"
	}
	sig, err := parseSignal(name)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	timeout, err := ptypes.Duration(req.Timeout)
	if err != nil || req.Timeout == nil {
		timeout = 5 * time.Second
	}
	if err := t.signal(sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return nil, status.Errorf(codes.Unknown, "signalling the task: %v", err)
	}
	select {
	case <-t.done:
	case <-time.After(timeout):
		_ = t.signal(syscall.SIGKILL)
		select {
		case <-t.done:
		case <-ctx.Done():
		}
	case <-ctx.Done():
	}
	return &drivers.StopTaskResponse{}, nil
}

func (d *driver) DestroyTask(_ context.Context, req *drivers.DestroyTaskRequest) (*drivers.DestroyTaskResponse, error) {
	t, err := d.get(req.TaskId)
	if err != nil {
		return nil, err
	}
	select {
	case <-t.done:
	default:
		if !req.Force {
			return nil, status.Error(codes.FailedPrecondition, "cannot destroy running task")
		}
		_ = t.signal(syscall.SIGKILL)
		<-t.done
	}
	d.mu.Lock()
	delete(d.tasks, req.TaskId)
	d.mu.Unlock()
	return &drivers.DestroyTaskResponse{}, nil
}

func (d *driver) InspectTask(_ context.Context, req *drivers.InspectTaskRequest) (*drivers.InspectTaskResponse, error) {
	t, err := d.get(req.TaskId)
	if err != nil {
		return nil, err
	}
	started, _ := ptypes.TimestampProto(t.startedAt)
	ts := &drivers.TaskStatus{Id: t.config.Id, Name: t.config.Name, State: drivers.TaskState_RUNNING, StartedAt: started}
	select {
	case <-t.done:
		r := t.result
		ts.State = drivers.TaskState_EXITED
		ts.CompletedAt, _ = ptypes.TimestampProto(t.completed)
		ts.Result = &r
	default:
	}
	return &drivers.InspectTaskResponse{
		Task:   ts,
		Driver: &drivers.TaskDriverStatus{Attributes: map[string]string{"pid": strconv.Itoa(t.state.Pid)}},
	}, nil
}

func (d *driver) SignalTask(_ context.Context, req *drivers.SignalTaskRequest) (*drivers.SignalTaskResponse, error) {
	t, err := d.get(req.TaskId)
	if err != nil {
		return nil, err
	}
	sig, err := parseSignal(req.Signal)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := t.signal(sig); err != nil {
		return nil, status.Errorf(codes.Unknown, "signalling the task: %v", err)
	}
	return &drivers.SignalTaskResponse{}, nil
}

// TaskEvents streams task events as Nomad's driver server does: nothing is sent (not even
// response headers, on grpc-go) until the first event.
func (d *driver) TaskEvents(_ *drivers.TaskEventsRequest, stream drivers.Driver_TaskEventsServer) error {
	ch := make(chan *drivers.DriverTaskEvent, 16)
	d.mu.Lock()
	d.listeners[ch] = struct{}{}
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		delete(d.listeners, ch)
		d.mu.Unlock()
	}()
	for {
		select {
		case event := <-ch:
			if err := stream.Send(event); err != nil {
				return err
			}
		case <-stream.Context().Done():
			return nil
		}
	}
}

// driverPlugin is the go-plugin plugin "driver", as Nomad's drivers.PluginDriver registers it.
type driverPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	impl *driver
}

func (p *driverPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	base.RegisterBasePluginServer(s, p.impl)
	drivers.RegisterDriverServer(s, p.impl)
	return nil
}

func (p *driverPlugin) GRPCClient(context.Context, *plugin.GRPCBroker, *grpc.ClientConn) (interface{}, error) {
	return nil, errors.New("gofork is a plugin, not a plugin client")
}

func main() {
	// go-plugin swaps os.Stderr for a pipe once serving: the logger keeps the original.
	logger := hclog.New(&hclog.LoggerOptions{Name: pluginName, Level: hclog.Trace, JSONFormat: true, Output: os.Stderr})
	d := &driver{logger: logger, tasks: map[string]*task{}, listeners: map[chan *drivers.DriverTaskEvent]struct{}{}}
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: plugin.HandshakeConfig{
			ProtocolVersion:  2,
			MagicCookieKey:   magicCookieKey,
			MagicCookieValue: magicCookieValue,
		},
		Plugins:    map[string]plugin.Plugin{"driver": &driverPlugin{impl: d}},
		GRPCServer: plugin.DefaultGRPCServer,
		Logger:     logger,
	})
}
