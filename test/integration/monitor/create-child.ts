/**
 * Child process for the "conmon survives its creator" test: creates and starts a container in the
 * fixture dir given on the command line, prints its pids as JSON, then waits to be killed.
 */
import { MonitorFixture } from './fixture.js';

const [base, id] = process.argv.slice(2);
const fx = MonitorFixture.at(base!);
const c = await fx.create({ args: ['sleep', '1000'] }, {}, id);
await fx.runc.start(c.id);
process.stdout.write(JSON.stringify({ pid: c.pid, conmonPid: c.conmonPid }) + '\n');
setInterval(() => {}, 1 << 30);
