# Three isolated sleeps: each runs in its own PID, mount, IPC and UTS namespaces (exec driver).
job "sleep" {
  datacenters = ["dc1"]

  group "sleepers" {
    count = 3

    task "sleep" {
      driver = "exec"

      config {
        command = "/bin/sleep"
        args    = ["3600"]
      }

      resources {
        cpu    = 50
        memory = 32
      }
    }
  }
}
