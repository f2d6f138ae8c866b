# A batch job that prints one line and exits. Runs under Drover's dev agent and under Nomad.
job "hello" {
  datacenters = ["dc1"]
  type        = "batch"

  group "hello" {
    task "hello" {
      driver = "raw_exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "echo \"Hello from Drover, allocation $NOMAD_ALLOC_ID on ${node.unique.name}\""]
      }

      resources {
        cpu    = 50
        memory = 32
      }
    }
  }
}
