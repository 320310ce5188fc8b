"""Hosts that share no disk and reach each other only over a network, on
one machine: each host is a network namespace (its own address on a bridge
made by the test) and each process started on it gets its own mount
namespace with a private, empty /tmp and data directories. Nothing is
shared but what the hosts serve each other (the object store).

Needs root and `ip` (iproute2) and `unshare` (util-linux); `available()`
says why not when they are missing. Everything made here (namespaces, the
bridge, veth pairs, addresses) is removed by `Network.close()`.
"""

import os
import shlex
import shutil
import subprocess
import time


def available():
    """None when hosts can be made here, else the reason they cannot."""
    if os.geteuid() != 0:
        return "network and mount namespaces need root"
    for tool in ("ip", "unshare", "nsenter"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    probe = f"sqprobe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"network namespaces are not permitted: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def sh(*args, check=True):
    """Runs a command; its stdout."""
    done = subprocess.run(list(args), capture_output=True, text=True)
    if check and done.returncode != 0:
        raise RuntimeError(f"{shlex.join(args)}: {done.stderr.strip()}")
    return done.stdout


class Network:
    """A switch (a bridge in a namespace of its own) and the hosts on it,
    addressed 10.213.<subnet>.<n>/24. `keep`: directories every host's
    processes still see where they lie under /tmp (the repository, the
    binaries, the Python environment), read-only."""

    def __init__(self, tag=None, keep=()):
        self.tag = tag or f"sq{os.getpid() % 10000}"
        self.keep = [str(k) for k in keep if str(k).startswith("/tmp/")]
        self.subnet = 100 + os.getpid() % 100
        self.switch = f"{self.tag}-sw"
        self.hosts = []
        self.next_address = 10
        sh("ip", "netns", "add", self.switch)
        sh("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", self.switch, "link", "set", "br0", "up")

    def address(self):
        self.next_address += 1
        return f"10.213.{self.subnet}.{self.next_address}"

    def host(self, name):
        """A new host: its namespace, its link to the switch, its address."""
        host = Host(self, name, self.address())
        self.hosts.append(host)
        return host

    def close(self):
        for host in self.hosts:
            host.stop_all()
        for host in self.hosts:
            sh("ip", "netns", "del", host.ns, check=False)
        sh("ip", "netns", "del", self.switch, check=False)


class Host:
    """One host: a network namespace linked to the switch."""

    def __init__(self, network, name, address):
        self.network = network
        self.name = name
        self.address = address
        self.ns = f"{network.tag}-{name}"
        self.processes = []
        # The switch side of the link, named for the host (15 characters
        # at most), moved into the switch's namespace.
        port = f"v{len(network.hosts)}{network.tag}"[:15]
        sh("ip", "netns", "add", self.ns)
        sh("ip", "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", self.ns)
        sh("ip", "link", "set", port, "netns", network.switch)
        sh("ip", "-n", network.switch, "link", "set", port, "master", "br0")
        sh("ip", "-n", network.switch, "link", "set", port, "up")
        sh("ip", "-n", self.ns, "addr", "add", f"{address}/24", "dev", "eth0")
        sh("ip", "-n", self.ns, "link", "set", "eth0", "up")
        sh("ip", "-n", self.ns, "link", "set", "lo", "up")

    def add_address(self, address=None):
        """Another address of this host (a new one unless given)."""
        address = address or self.network.address()
        sh("ip", "-n", self.ns, "addr", "add", f"{address}/24", "dev", "eth0")
        return address

    def remove_address(self, address):
        sh("ip", "-n", self.ns, "addr", "del", f"{address}/24", "dev", "eth0")

    def link(self, up):
        """Cuts the host off the network (its processes and sockets stay),
        or links it again."""
        sh("ip", "-n", self.ns, "link", "set", "eth0", "up" if up else "down")

    def disks(self, mounts):
        """Disks of this host that outlive the processes using them: tmpfs
        of the given sizes ((directory, size) pairs) and a private /tmp, in
        a mount namespace held by a process of its own. Pass it to `start`
        as `disks`."""
        return self.start(["sleep", "infinity"], mounts=mounts)

    def start(self, args, env=None, private=(), mounts=(), copies=(), log=None,
              private_tmp=True, stdin=False, disks=None, piped=True):
        """Starts `args` on this host in a mount namespace of its own, with
        an empty tmpfs over /tmp (unless not `private_tmp`: the test's
        client reads the test's files) in which the network's `keep`
        directories are bound read-only, then an empty tmpfs over each
        directory of `private`, `mounts` ((directory, size) pairs) as tmpfs
        of that size, and `copies` ((source, destination) pairs) copied in
        (read before /tmp is hidden). Put private directories under /tmp:
        a mount point elsewhere would be made on the machine's disk.

        Returns the Popen; stdout is piped (unless not `piped`: then it goes
        to `log` with stderr; a chatty process must not fill a pipe nobody
        reads), stdin too if `stdin`, stderr goes to `log`. With `disks`
        (see `disks`), the program runs in that mount namespace instead,
        and the mount options are not used."""
        quote = shlex.quote
        setup = ["mount -t tmpfs tmpfs /mnt"]
        for n, path in enumerate(self.network.keep):
            setup += [f"mkdir /mnt/keep{n}", f"mount --bind {quote(path)} /mnt/keep{n}"]
        for n, (source, _) in enumerate(copies):
            setup.append(f"cp {quote(str(source))} /mnt/copy{n}")
        if private_tmp:
            setup.append("mount -t tmpfs tmpfs /tmp")
            for n, path in enumerate(self.network.keep):
                setup += [f"mkdir -p {quote(path)}",
                          f"mount --bind -o ro /mnt/keep{n} {quote(path)}"]
        for directory in private:
            setup += [f"mkdir -p {quote(directory)}",
                      f"mount -t tmpfs tmpfs {quote(directory)}"]
        for directory, size in mounts:
            setup += [f"mkdir -p {quote(directory)}",
                      f"mount -t tmpfs -o size={size} tmpfs {quote(directory)}"]
        for n, (_, destination) in enumerate(copies):
            setup.append(f"cp /mnt/copy{n} {quote(str(destination))}")
        script = " && ".join(setup) + ' && exec "$@"'
        if disks is not None:
            # The program joins the mount namespace holding the disks.
            command = ["ip", "netns", "exec", self.ns, "nsenter", "-t", str(disks.pid), "-m",
                       *args]
        else:
            command = ["ip", "netns", "exec", self.ns, "unshare", "--mount", "--propagation",
                       "private", "sh", "-c", script, "sh", *args]
        errors = open(log, "a") if log else subprocess.DEVNULL
        proc = subprocess.Popen(
            command, stdout=subprocess.PIPE if piped else errors,
            stdin=subprocess.PIPE if stdin else None, stderr=errors,
            text=True, env={**os.environ, **(env or {})},
        )
        self.processes.append(proc)
        return proc

    def run_in_mounts(self, proc, *args):
        """Runs a command inside the mount namespace of `proc` (a process
        this host started; `ip netns exec`, `unshare` and `sh` exec, so its
        pid is the program's), e.g. to fill a disk only it sees."""
        return sh("nsenter", "-t", str(proc.pid), "-m", *args)

    def stop_all(self):
        for proc in self.processes:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def banner_url(proc, timeout=120):
    """The URL at the end of the first line `proc` prints (the coordinator's
    and the workers' banner)."""
    import select
    deadline = time.time() + timeout
    while time.time() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.5)
        if ready:
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError(f"process exited with {proc.wait()} before its banner")
            if "listening on" in line:
                return line.strip().rsplit(" ", 1)[-1]
        elif proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before its banner")
    raise RuntimeError("no banner in time")
