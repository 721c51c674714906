// Print vitest's JSON report as one closing line: "N passed, N failed, N skipped".
import { readFileSync } from 'node:fs';

const report = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const skipped = report.numPendingTests + report.numTodoTests;
for (const f of report.testResults) {
  for (const t of f.assertionResults) {
    if (t.status === 'pending' || t.status === 'skipped' || t.status === 'todo') console.log(`skipped: ${t.fullName}`);
  }
}
console.log(`${report.numPassedTests} passed, ${report.numFailedTests} failed, ${skipped} skipped`);
process.exit(report.numFailedTests > 0 || !report.success ? 1 : 0);
