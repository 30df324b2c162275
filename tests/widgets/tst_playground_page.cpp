// PlaygroundPage with the real shard-worker (offscreen): answers stream token by token, two panes
// with the same prompt and seed give the same text from the same model, Stop cancels a long
// generation at once, and a bad model folder is a message on the page.
#include <QComboBox>
#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QFileInfo>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLineEdit>
#include <QPushButton>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QtTest>

#include "studio_test_util.h"
#include "widgets/export_dialog.h"
#include "widgets/playground_page.h"

using shard::widgets::ExportDialog;
using shard::widgets::PlaygroundPage;

class TstPlaygroundPage : public QObject {
    Q_OBJECT
    QTemporaryDir m_tmp;
    QString m_worker;
    QString m_model;

private Q_SLOTS:
    void initTestCase()
    {
        QVERIFY(m_tmp.isValid());
        m_worker = shard::test::findWorker();
        if (m_worker.isEmpty())
            QSKIP("shard-worker of this build not found (build the shard-worker target)");
        shard::test::isolateSettings(m_tmp.path() + "/settings");
        m_model = m_tmp.path() + "/model";
        const QString error = shard::test::initTinyModel(m_worker, m_model);
        QVERIFY2(error.isEmpty(), qPrintable(error));
    }

    void argumentsFollowTheForm()
    {
        PlaygroundPage page;
        QVERIFY(page.workerArgs(0).isEmpty());
        page.setModelPath(0, m_model);
        page.setPrompt("Hello");
        page.setChat(true, "Be brief.");
        page.setSampling(0.5, 7, 0.9, 0.05, 3);
        page.setMaxNewTokens(11);
        const QStringList a = page.workerArgs(0);
        QCOMPARE(a.value(a.indexOf("--model") + 1), m_model);
        QCOMPARE(a.value(a.indexOf("--prompt") + 1), QString("Hello"));
        QCOMPARE(a.value(a.indexOf("--top-k") + 1), QString("7"));
        QCOMPARE(a.value(a.indexOf("--seed") + 1), QString("3"));
        QCOMPARE(a.value(a.indexOf("--max-new-tokens") + 1), QString("11"));
        QCOMPARE(a.value(a.indexOf("--system") + 1), QString("Be brief."));
        QVERIFY(a.contains("--chat"));
        QVERIFY(page.workerArgs(1).isEmpty());
        // A checkpoint folder (it has a manifest) goes to --checkpoint.
        QDir().mkpath(m_tmp.path() + "/step-1");
        QFile manifest(m_tmp.path() + "/step-1/manifest.json");
        QVERIFY(manifest.open(QIODevice::WriteOnly));
        manifest.close();
        page.setModelPath(1, m_tmp.path() + "/step-1");
        QCOMPARE(page.workerArgs(1).value(0), QString("--checkpoint"));
    }

    void streamsSideBySide()
    {
        PlaygroundPage page;
        page.setWorkerProgram(m_worker);
        page.setModelPath(0, m_model);
        page.setModelPath(1, m_model);
        page.setPrompt("ab");
        page.setSampling(1.0, 0, 1.0, 0.0, 42);
        page.setMaxNewTokens(24);
        page.setIgnoreEos(true);
        QSignalSpy tokens(&page, &PlaygroundPage::tokenArrived);
        QSignalSpy done(&page, &PlaygroundPage::allFinished);
        page.generate();
        QVERIFY(page.isRunning());
        QVERIFY(done.wait(60000));
        QCOMPARE(tokens.count(), 48); // one signal per token, both panes
        QVERIFY2(page.messageText().isEmpty(), qPrintable(page.messageText()));
        QVERIFY(!page.outputText(0).isEmpty());
        // Same model, prompt and seed: the same answer.
        QCOMPARE(page.outputText(1), page.outputText(0));
        QVERIFY2(page.statusText(0).contains("24 tokens") && page.statusText(0).contains("tok/s"),
            qPrintable(page.statusText(0)));
        // Another seed, another answer (sampling at temperature 1 from a random model).
        page.setSampling(1.0, 0, 1.0, 0.0, 43);
        page.setModelPath(1, QString());
        const QString first = page.outputText(0);
        page.generate();
        QVERIFY(done.wait(60000));
        QVERIFY(page.outputText(0) != first);
    }

    void stopCancelsAtOnce()
    {
        // tiny-15m: long enough (2048 positions, a few ms a token) to still be running.
        const QString big = m_tmp.path() + "/tiny-15m";
        QProcess init;
        init.start(m_worker, {"init-model", "--preset", "tiny-15m", "--out", big});
        QVERIFY(init.waitForFinished(120000) && init.exitCode() == 0);
        PlaygroundPage page;
        page.setWorkerProgram(m_worker);
        page.setModelPath(0, big);
        page.setMaxNewTokens(1000000); // stops at the context (2048) unless cancelled
        page.setIgnoreEos(true);
        page.setSampling(1.0, 0, 1.0, 0.0, 1);
        QSignalSpy tokens(&page, &PlaygroundPage::tokenArrived);
        QSignalSpy finished(&page, &PlaygroundPage::paneFinished);
        page.generate();
        QVERIFY(tokens.wait(60000));
        QElapsedTimer t;
        t.start();
        page.stop();
        QTRY_VERIFY_WITH_TIMEOUT(!page.isRunning(), 3000);
        QVERIFY2(t.elapsed() < 3000, "Stop did not end the worker promptly");
        QCOMPARE(finished.count(), 1);
        QCOMPARE(finished.at(0).at(2).toBool(), true); // cancelled
        QVERIFY(page.statusText(0).contains("stopped"));
        const int seen = tokens.count();
        QTest::qWait(300);
        QCOMPARE(tokens.count(), seen); // nothing after the stop
        QVERIFY(seen < 2000);
    }

    // Export…: the model being tried, as GGUF, through the real worker; a model folder has no
    // Hugging Face export to offer, and no model is a message.
    void exportsTheModelAsGguf()
    {
        PlaygroundPage page;
        page.setWorkerProgram(m_worker);
        page.show();
        QVERIFY(!page.openExport()); // no model chosen yet
        page.setModelPath(0, m_model);
        ExportDialog* dialog = page.openExport();
        QVERIFY(dialog);
        QVERIFY(dialog->workerArguments().contains(m_model));
        auto* out = shard::test::field<QLineEdit>(*dialog, "exportOut");
        QVERIFY2(out->text().endsWith("shard-exports/model-f16.gguf"), qPrintable(out->text()));
        out->setText(m_tmp.path() + "/exported/model-f16.gguf");
        QSignalSpy finished(dialog, &ExportDialog::finished);
        dialog->start();
        QTRY_COMPARE_WITH_TIMEOUT(finished.count(), 1, 120000);
        QVERIFY2(finished.at(0).at(0).toBool(), qPrintable(dialog->statusText()));
        // The path the user chose, in the message and still in the field.
        QVERIFY2(dialog->statusText().contains(m_tmp.path() + "/exported/model-f16.gguf"),
            qPrintable(dialog->statusText()));
        QCOMPARE(out->text(), m_tmp.path() + "/exported/model-f16.gguf");
        QVERIFY(QFileInfo(m_tmp.path() + "/exported/model-f16.gguf").size() > 0);
        QVERIFY(QFileInfo::exists(m_tmp.path() + "/exported/model-f16.Modelfile"));
        shard::test::selectData(shard::test::field<QComboBox>(*dialog, "exportFormat"), "hf");
        bool anyEnabled = false;
        for (auto* b : dialog->findChildren<QPushButton*>())
            anyEnabled = anyEnabled || (b->text().contains("Export") && b->isEnabled());
        QVERIFY(!anyEnabled); // already a Hugging Face folder
        dialog->close();
    }

    void badModelIsAMessage()
    {
        PlaygroundPage page;
        page.setWorkerProgram(m_worker);
        page.setModelPath(0, m_tmp.path() + "/nowhere");
        QSignalSpy done(&page, &PlaygroundPage::allFinished);
        page.generate();
        QVERIFY(done.wait(30000));
        QVERIFY2(page.messageText().contains("no such folder"), qPrintable(page.messageText()));
        PlaygroundPage empty;
        empty.generate();
        QVERIFY(empty.messageText().contains("Choose a model"));
    }

    // The Chat row names the template Chat applies and where it comes from (the engine's own
    // choice: the run's, else the tokenizer's, else guessed), says when there is none it can
    // render and lets one be chosen, and suggests Chat for a run fine-tuned on chat data (issue
    // 27, item 11: such a run answered a plain prompt with "0 tokens (stop: eos)" and nothing
    // said why; a run trained with --chat-template was prompted in its tokenizer's template).
    void chatHintNamesTheTemplateAndSuggestsChat()
    {
        QTemporaryDir tmp;
        QVERIFY(tmp.isValid());
        auto write = [&](const QString& name, const QByteArray& text) {
            QDir().mkpath(QFileInfo(tmp.filePath(name)).path());
            QFile f(tmp.filePath(name));
            QVERIFY(f.open(QIODevice::WriteOnly));
            f.write(text);
        };
        // A copy of the tiny model's tokenizer (the demo one: a Llama 3 template) whose
        // tokenizer_config.json has `chatTemplate` ("": none).
        auto tokenizerWith = [&](const QString& folder, const QString& chatTemplate) {
            QDir().mkpath(tmp.filePath(folder));
            QFile::copy(m_model + "/tokenizer.json", tmp.filePath(folder + "/tokenizer.json"));
            QFile f(m_model + "/tokenizer_config.json");
            QVERIFY(f.open(QIODevice::ReadOnly));
            QJsonObject config = QJsonDocument::fromJson(f.readAll()).object();
            if (chatTemplate.isEmpty())
                config.remove("chat_template");
            else
                config["chat_template"] = chatTemplate;
            write(folder + "/tokenizer_config.json", QJsonDocument(config).toJson());
        };
        // Plain string literals: moc reads this file too.
        write("chat.jsonl", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}\n");
        write("run/run.json",
            "{\"data\":[\"" + tmp.filePath("chat.jsonl").toUtf8()
                + "\"],\"data_format\":\"auto\",\"chat_template\":\"\",\"model\":\"/nowhere\"}");
        tokenizerWith("run/model", "{% for m in messages %}<|im_start|>{{ m.role }}{% endfor %}");
        tokenizerWith("plain", "");
        tokenizerWith("odd", "{{ messages }}");

        PlaygroundPage page;
        page.setModelPath(0, tmp.filePath("run"));
        QTRY_VERIFY2(page.chatHintText().contains("turn on Chat"), qPrintable(page.chatHintText()));
        page.setChat(true);
        QVERIFY2(page.chatHintText().contains(
                     "Chat uses the ChatML template (the tokenizer's chat_template)"),
            qPrintable(page.chatHintText()));
        // No template in the tokenizer: the engine's guess, said as such.
        page.setModelPath(0, tmp.filePath("plain"));
        QTRY_VERIFY2(page.chatHintText().contains("Llama 3 template (the tokenizer has no "
                                                  "chat_template; guessed from its special tokens"),
            qPrintable(page.chatHintText()));
        // A template the engine does not render: said, with the fix on this page.
        page.setModelPath(0, tmp.filePath("odd"));
        QTRY_VERIFY2(page.chatHintText().contains("Chat cannot wrap a prompt"),
            qPrintable(page.chatHintText()));
        QVERIFY2(
            page.chatHintText().contains("Choose a template"), qPrintable(page.chatHintText()));
        QVERIFY(!page.chatHintText().contains("--"));
        page.setChatTemplate("chatml");
        QTRY_VERIFY2(page.chatHintText().contains("ChatML template (chosen here)"),
            qPrintable(page.chatHintText()));
        QStringList a = page.workerArgs(0);
        QCOMPARE(a.value(a.indexOf("--chat-template") + 1), QString("chatml"));
        page.setChatTemplate(QString());
        QVERIFY(!page.workerArgs(0).contains("--chat-template"));
        page.setChat(false);
        page.setModelPath(0, tmp.filePath("plain"));
        QTRY_VERIFY(!page.checkingChat());
        QVERIFY(page.chatHintText().isEmpty()); // a plain model, a plain prompt: nothing to say

        // A run trained with --chat-template chatml on a tokenizer whose own is Llama 3: the
        // page and the worker both use the run's.
        QVERIFY(QDir().mkpath(tmp.filePath("trained")));
        QVERIFY(QFile::link(m_model, tmp.filePath("trained/model")));
        write("trained/run.json",
            "{\"data\":[\"" + tmp.filePath("chat.jsonl").toUtf8()
                + "\"],\"data_format\":\"chat\",\"chat_template\":\"chatml\",\"model\":\""
                + m_model.toUtf8() + "\"}");
        page.setModelPath(0, tmp.filePath("trained"));
        page.setChat(true);
        QTRY_VERIFY2(page.chatHintText().contains(
                         "ChatML template (the run was trained with it: --chat-template chatml)"),
            qPrintable(page.chatHintText()));
        QProcess worker;
        worker.start(m_worker,
            {"generate", "--model", tmp.filePath("trained"), "--chat", "--prompt", "hi",
                "--max-new-tokens", "1"});
        QVERIFY(worker.waitForFinished(60000));
        const QString err = QString::fromUtf8(worker.readAllStandardError());
        QVERIFY2(worker.exitCode() == 0, qPrintable(err));
        QVERIFY2(err.contains("chat template ChatML (the run's --chat-template chatml)"),
            qPrintable(err));
        // Given the exported model's folder, the same run is found.
        worker.start(m_worker,
            {"generate", "--model", tmp.filePath("trained/model"), "--chat", "--prompt", "hi",
                "--max-new-tokens", "1"});
        QVERIFY(worker.waitForFinished(60000));
        QVERIFY2(QString::fromUtf8(worker.readAllStandardError()).contains("ChatML (the run's"),
            "the exported model's run was not found");
        // A model folder of no run: the tokenizer's own.
        worker.start(m_worker,
            {"generate", "--model", m_model, "--chat", "--prompt", "hi", "--max-new-tokens", "1"});
        QVERIFY(worker.waitForFinished(60000));
        QVERIFY(QString::fromUtf8(worker.readAllStandardError())
                    .contains("chat template Llama 3 (the tokenizer's chat_template)"));
    }
};

QTEST_MAIN(TstPlaygroundPage)
#include "tst_playground_page.moc"
